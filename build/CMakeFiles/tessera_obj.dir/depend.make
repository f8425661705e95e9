# Empty dependencies file for tessera_obj.
# This may be replaced when dependencies are built.
