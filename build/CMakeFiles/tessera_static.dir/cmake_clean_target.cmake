file(REMOVE_RECURSE
  "libtessera.a"
)
