# Note [build speed]: what keeps a cold build cheap (CI builds the project three times on two cores
# and must finish in 45 minutes: docs/development.md has the measured stage table).
# - Precompiled headers (SYMMFLOW_PCH, ON by default): a target of ours with at least
#   SYMMFLOW_PCH_MIN_SOURCES C++ files precompiles the heavy third-party headers it uses (fmt, and
#   for tests GoogleTest, for tools nlohmann-json and CLI11) with the standard headers nearly every
#   file includes. Parsing gtest, fmt and json took 2-3 s of every test file's compile; the header
#   is compiled once per target instead (3-4 s, so a target of a few files is better off without
#   one). Force-included, so a file that forgets an include of these still compiles:
#   `-DSYMMFLOW_PCH=OFF` builds without them (docs/development.md) and shows such a file.
#   GCC 12 reports -Warray-bounds, -Wstringop-overflow and -Wstringop-overread false positives
#   inside libstdc++'s std::string (a moved by-value parameter) when the headers come from a PCH
#   (the same file, the same headers by #include or -include: no warning; the family of GCC bug
#   105651, as -Wrestrict in Warnings.cmake): those three are off for GCC in targets with a PCH; a
#   build without PCH (SYMMFLOW_PCH=OFF), and clang's asan tree, keep them.
# - Test code at -O1 in optimised builds (SYMMFLOW_TEST_OPT, default -O1): the library stays at the
#   build type's level; a test file at -O3 took 7.2 s to compile, at -O1 4.6 s, and the tests spend
#   their time in the library.
# Applied after every target exists, by the folder a target was made in, so no CMakeLists.txt
# has to remember it: symmflow_apply_build_speed() at the end of the top-level CMakeLists.txt.
option(SYMMFLOW_PCH "Precompiled headers for the heavy third-party headers (Note [build speed])" ON)
set(SYMMFLOW_TEST_OPT "-O1" CACHE STRING
    "Optimisation flag of test code in optimised builds; empty keeps the build type's")

set(symmflow_gcc_pch_false_positives
    -Wno-array-bounds -Wno-stringop-overflow -Wno-stringop-overread)
set(SYMMFLOW_PCH_MIN_SOURCES 6 CACHE STRING "Fewest C++ files for which a target gets a PCH")
set(symmflow_pch_std <algorithm> <cstdint> <cstring> <functional> <map> <memory> <optional>
    <string> <string_view> <utility> <vector>)

function(symmflow_collect_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    symmflow_collect_targets(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# The headers a target precompiles, by the folder it was made in (its role).
function(symmflow_target_pch target role)
  set(headers <fmt/format.h> ${symmflow_pch_std})
  if(role STREQUAL "test")
    list(APPEND headers <gtest/gtest.h>)
  elseif(role STREQUAL "tool")
    get_target_property(libs ${target} LINK_LIBRARIES)
    if("nlohmann_json::nlohmann_json" IN_LIST libs)
      list(APPEND headers <nlohmann/json.hpp>)
    endif()
    if("CLI11::CLI11" IN_LIST libs)
      list(APPEND headers <CLI/CLI.hpp>)
    endif()
  endif()
  # C++ sources only: nvcc compiles the .cu files of the same targets without them.
  list(TRANSFORM headers REPLACE "^(.*)$" "$<$<COMPILE_LANGUAGE:CXX>:\\1>")
  target_precompile_headers(${target} PRIVATE ${headers})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE
                           $<$<COMPILE_LANGUAGE:CXX>:${symmflow_gcc_pch_false_positives}>)
  endif()
endfunction()

function(symmflow_apply_build_speed)
  symmflow_collect_targets(${PROJECT_SOURCE_DIR} targets)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" build_type)
  set(optimised OFF)
  if(build_type MATCHES "^(RELEASE|RELWITHDEBINFO)$")
    set(optimised ON)
  endif()
  set(compiled_types EXECUTABLE SHARED_LIBRARY MODULE_LIBRARY STATIC_LIBRARY OBJECT_LIBRARY)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(imported ${target} IMPORTED)
    if(imported OR NOT type IN_LIST compiled_types)
      continue()
    endif()
    get_target_property(dir ${target} SOURCE_DIR)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${dir})
    # Not ours: the libraries nanobind makes in python/ for its own sources.
    if(target MATCHES "^nanobind")
      continue()
    endif()
    # Objects that only link others' objects (the layer checks, libsymmflow.so) compile nothing.
    get_target_property(sources ${target} SOURCES)
    list(FILTER sources EXCLUDE REGEX "^\\$<TARGET_OBJECTS:")
    if(NOT sources)
      continue()
    endif()
    if(rel MATCHES "^tests(/|$)")
      set(role test)
    elseif(rel MATCHES "^(tools|bench|examples|fuzz|python)(/|$)")
      set(role tool)
    else()
      set(role lib)
    endif()
    list(FILTER sources INCLUDE REGEX "\\.cpp$")
    list(LENGTH sources cxx_sources)
    if(SYMMFLOW_PCH AND cxx_sources GREATER_EQUAL SYMMFLOW_PCH_MIN_SOURCES)
      symmflow_target_pch(${target} ${role})
    endif()
    if(role STREQUAL "test" AND SYMMFLOW_TEST_OPT AND optimised)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${SYMMFLOW_TEST_OPT}>)
    endif()
  endforeach()
endfunction()
