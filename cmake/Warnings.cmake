# One warning set for every target of the project.
set(SYMMFLOW_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter)
# GCC 12 reports -Wrestrict false positives inside std::string at -O3 (GCC bug 105651).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND SYMMFLOW_WARNINGS -Wno-restrict)
endif()
if(SYMMFLOW_WERROR)
  list(APPEND SYMMFLOW_WARNINGS -Werror)
endif()
function(symmflow_target_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${SYMMFLOW_WARNINGS}>)
endfunction()
