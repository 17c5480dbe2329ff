// C++ errors as Python exceptions: every symmflow::Error becomes an instance of a class of
// symmflow._errors chosen by its code (ProgramError for api::ProgramError, with its diagnostics),
// whose str() is the C++ what().
#include "binding.hpp"

namespace symmflow::python {

namespace {

const char* class_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidUsage: return "InvalidUsage";
    case ErrorCode::Timeout: return "Timeout";
    case ErrorCode::PeerFailure: return "PeerFailure";
    default: return "Error";
  }
}

void raise(const char* cls_name, const Error& e, nb::object diagnostics) {
  nb::object errors = nb::module_::import_("symmflow._errors");
  nb::object instance = errors.attr(cls_name)(nb::str(e.what()), error_code_name(e.code()),
                                             diagnostics);
  PyErr_SetObject(instance.type().ptr(), instance.ptr());
}

}  // namespace

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const api::ProgramError& e) {
      nb::list diagnostics;
      for (const api::Diagnostic& d : e.diagnostics())
        diagnostics.append(nb::make_tuple(d.file, d.line, d.column, d.message));
      raise("ProgramError", e, diagnostics);
    } catch (const Error& e) {
      raise(class_for(e.code()), e, nb::list());
    }
  });
}

}  // namespace symmflow::python
