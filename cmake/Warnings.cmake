# One warning set for every target of the project.
set(SYMMFLOW_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter)
if(SYMMFLOW_WERROR)
  list(APPEND SYMMFLOW_WARNINGS -Werror)
endif()
function(symmflow_target_warnings target)
  target_compile_options(${target} PRIVATE ${SYMMFLOW_WARNINGS})
endfunction()
