# cmake -DSRC=python/symmflow -DDST=build/x/python/symmflow -P link_tree.cmake: symlinks every
# entry of SRC into DST (a folder that also holds the built _core module) and removes links
# whose target is gone.
file(MAKE_DIRECTORY ${DST})
file(GLOB entries RELATIVE ${SRC} ${SRC}/*)
foreach(e IN LISTS entries)
  if(NOT e STREQUAL "__pycache__" AND NOT EXISTS ${DST}/${e})
    file(CREATE_LINK ${SRC}/${e} ${DST}/${e} SYMBOLIC)
  endif()
endforeach()
file(GLOB links ${DST}/*)
foreach(l IN LISTS links)
  if(IS_SYMLINK ${l} AND NOT EXISTS ${l})
    file(REMOVE ${l})
  endif()
endforeach()
