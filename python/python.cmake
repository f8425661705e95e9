# The Python package `tessera` (python/tessera/, pure Python) and its C extension tessera._C
# (python/src/*.c), built when Debian's python3-dev and python3-numpy are there (against
# /usr/bin/python3, not a pyenv python3 that may come first in PATH). The build tree's
# python/ folder is importable (PYTHONPATH=build/python); `cmake --install` puts the package in
# the interpreter's site directory under the install prefix (TS_PYTHON_SITE, relative to it).
option(TS_PYTHON "Build the tessera Python package (needs python3-dev, python3-numpy)" ON)
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
set(TS_PY_REASON "")
if(TS_PYTHON)
  find_package(Python3 COMPONENTS Interpreter Development.Module NumPy)
  if(NOT Python3_Interpreter_FOUND)
    set(TS_PY_REASON "no python3 interpreter")
  elseif(NOT Python3_Development.Module_FOUND)
    set(TS_PY_REASON "python3-dev not installed (scripts/install-deps.sh)")
  elseif(NOT Python3_NumPy_FOUND)
    set(TS_PY_REASON "python3-numpy not installed (scripts/install-deps.sh)")
  endif()
else()
  set(TS_PY_REASON "configured with -DTS_PYTHON=OFF")
endif()

if(TS_PY_REASON STREQUAL "")
  file(GLOB TS_PY_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/src/*.c)
  Python3_add_library(tessera_python MODULE WITH_SOABI ${TS_PY_SOURCES})
  set_target_properties(tessera_python PROPERTIES OUTPUT_NAME _C
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/tessera
                        C_VISIBILITY_PRESET hidden)
  target_link_libraries(tessera_python PRIVATE tessera_static Python3::NumPy)
  # the pure-Python files next to the extension in the build tree
  file(GLOB_RECURSE TS_PY_FILES CONFIGURE_DEPENDS RELATIVE ${CMAKE_SOURCE_DIR}/python ${CMAKE_SOURCE_DIR}/python/tessera/*.py)
  # a copy whose source is gone (a module turned into a package: dataset.py -> dataset/) is removed,
  # so the build tree imports what the source tree has
  file(GLOB_RECURSE TS_PY_BUILT RELATIVE ${CMAKE_BINARY_DIR}/python ${CMAKE_BINARY_DIR}/python/tessera/*.py)
  foreach(f ${TS_PY_BUILT})
    if(NOT EXISTS ${CMAKE_SOURCE_DIR}/python/${f})
      file(REMOVE ${CMAKE_BINARY_DIR}/python/${f})
    endif()
  endforeach()
  set(TS_PY_OUT "")
  foreach(f ${TS_PY_FILES})
    add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/python/${f}
                       COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/python/${f} ${CMAKE_BINARY_DIR}/python/${f}
                       DEPENDS ${CMAKE_SOURCE_DIR}/python/${f})
    list(APPEND TS_PY_OUT ${CMAKE_BINARY_DIR}/python/${f})
  endforeach()
  # what the extension was built for: named when another interpreter cannot load it
  set(TS_PY_BUILD_INFO "# written by CMake (python/python.cmake): the interpreter tessera._C was built for\n")
  string(APPEND TS_PY_BUILD_INFO "python = '${Python3_EXECUTABLE}'\nversion = '${Python3_VERSION}'\nnumpy = '${Python3_NumPy_VERSION}'\n")
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/python/tessera/_build.py CONTENT "${TS_PY_BUILD_INFO}")
  add_custom_target(tessera_python_files ALL DEPENDS ${TS_PY_OUT})
  add_dependencies(tessera_python tessera_python_files)
  # the site directory relative to the prefix: Debian's python reads <prefix>/lib/python3.X/dist-packages
  execute_process(COMMAND ${Python3_EXECUTABLE} -c
    "import sysconfig as s, sys; d = 'deb_system' in s.get_scheme_names(); v = '%d.%d' % sys.version_info[:2]; print('lib/python%s/dist-packages' % v if d else s.get_path('platlib', 'posix_prefix', vars={'platbase': '.', 'base': '.'})[2:])"
    OUTPUT_VARIABLE TS_PY_SITE_DEFAULT OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(TS_PYTHON_SITE "${TS_PY_SITE_DEFAULT}" CACHE STRING "Python package install directory (relative to the prefix)")
  install(TARGETS tessera_python LIBRARY DESTINATION ${TS_PYTHON_SITE}/tessera)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/tessera DESTINATION ${TS_PYTHON_SITE} FILES_MATCHING PATTERN "*.py")
  install(FILES ${CMAKE_BINARY_DIR}/python/tessera/_build.py DESTINATION ${TS_PYTHON_SITE}/tessera)
  set(TS_PY_ENV "PYTHONPATH=${CMAKE_BINARY_DIR}/python;TESSERA_BUILD=${CMAKE_BINARY_DIR};TESSERA_PY_SITE=${TS_PYTHON_SITE};TESSERA_BIN=$<TARGET_FILE:tessera>;TESSERA_SRC=${CMAKE_SOURCE_DIR};MPIEXEC=${MPIEXEC_EXECUTABLE};OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
  if(CMAKE_BUILD_TYPE STREQUAL "Asan")
    # an instrumented extension in an uninstrumented interpreter: the sanitizer runtimes are
    # preloaded; leak checking off (the interpreter's own allocations live to exit; the C tests
    # check the library's leaks)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE TS_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libubsan.so OUTPUT_VARIABLE TS_LIBUBSAN OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(TS_PY_ENV "${TS_PY_ENV};LD_PRELOAD=${TS_LIBASAN}:${TS_LIBUBSAN};ASAN_OPTIONS=detect_leaks=0")
    # the stand-in driver runs no kernel in this build (tests skip what needs its numbers)
    set(TS_PY_ENV "${TS_PY_ENV};TS_EMU=0")
  endif()
  file(GLOB TS_PY_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/python/test_*.py)
  foreach(t ${TS_PY_TESTS})
    get_filename_component(name ${t} NAME_WE)
    add_test(NAME py_${name} COMMAND ${Python3_EXECUTABLE} ${t} -v)
    # tier labels (CMakeLists.txt): python, and mpi for a test that starts jobs (pyutil.mpirun)
    file(READ ${t} ts_py_body)
    set(ts_py_labels python)
    if(ts_py_body MATCHES "pyutil\\.mpirun\\(")
      list(APPEND ts_py_labels mpi)
    endif()
    set_tests_properties(py_${name} PROPERTIES ENVIRONMENT "${TS_PY_ENV}" TIMEOUT 300 SKIP_RETURN_CODE ${TS_SKIP_CODE}
                         LABELS "${ts_py_labels}")
  endforeach()
else()
  message(STATUS "tessera Python package not built: ${TS_PY_REASON}")
  add_test(NAME py_tessera COMMAND sh -c "echo 'SKIP: tessera Python package not built: ${TS_PY_REASON}'; exit 77")
  set_tests_properties(py_tessera PROPERTIES SKIP_RETURN_CODE ${TS_SKIP_CODE} LABELS python)
endif()
