file(REMOVE_RECURSE
  "libtessera.a"
  "libtessera.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tessera_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
