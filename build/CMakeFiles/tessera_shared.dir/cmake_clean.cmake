file(REMOVE_RECURSE
  "libtessera.pdb"
  "libtessera.so"
  "libtessera.so.0"
  "libtessera.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tessera_shared.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
