# Empty compiler generated dependencies file for test_graph_core.
# This may be replaced when dependencies are built.
