file(REMOVE_RECURSE
  "CMakeFiles/test_graph_core.dir/tests/graph/test_graph_core.c.o"
  "CMakeFiles/test_graph_core.dir/tests/graph/test_graph_core.c.o.d"
  "CMakeFiles/test_graph_core.dir/tests/test_util.c.o"
  "CMakeFiles/test_graph_core.dir/tests/test_util.c.o.d"
  "test_graph_core"
  "test_graph_core.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_graph_core.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
