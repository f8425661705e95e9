# Empty dependencies file for tessera_static.
# This may be replaced when dependencies are built.
