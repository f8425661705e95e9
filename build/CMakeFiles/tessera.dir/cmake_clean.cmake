file(REMOVE_RECURSE
  "CMakeFiles/tessera.dir/src/cli/main.c.o"
  "CMakeFiles/tessera.dir/src/cli/main.c.o.d"
  "tessera"
  "tessera.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tessera.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
