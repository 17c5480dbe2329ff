# Note [one libstdc++]: symmflow's libraries must use the process's one shared libstdc++. A
# compiler whose lib folder has no libstdc++.so (a GCC built in /opt, as on the GPU machines)
# links libstdc++ statically into every shared library and exports its symbols; loaded into a
# Python process that already holds the system's libstdc++ (PyTorch's), the two copies' locales
# and allocators meet: measured on an H100 machine, the cuDNN frontend's first std::ostringstream
# crashed with SIGSEGV (issue 40), and importing symmflow before torch ended in
# "free(): invalid pointer". The check asks the compiler where libstdc++.so is; a bare name back
# means it has none.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE symmflow_libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT IS_ABSOLUTE "${symmflow_libstdcxx}" OR NOT EXISTS "${symmflow_libstdcxx}")
    message(WARNING
      "${CMAKE_CXX_COMPILER} has no shared libstdc++ (-print-file-name=libstdc++.so gave "
      "'${symmflow_libstdcxx}'): it links libstdc++ statically into symmflow's shared libraries, "
      "which then crash when loaded beside another libstdc++ (a PyTorch process; "
      "Note [one libstdc++] in cmake/Toolchain.cmake). Configure with the system's compiler, "
      "e.g. -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++.")
  endif()
endif()
