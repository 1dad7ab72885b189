# cmake -P driver for the package tests (see tests/package/CMakeLists.txt).
#   CTG_PKG_MODE=install           cmake --install CTG_PKG_BUILD_DIR into a fresh CTG_PKG_PREFIX
#   CTG_PKG_MODE=add_subdirectory  configure+build+run the consumer against CTG_PKG_SOURCE_DIR
#   CTG_PKG_MODE=find_package      configure+build+run the consumer against CTG_PKG_PREFIX
cmake_minimum_required(VERSION 3.25)

function(run_step what)
  string(REPLACE ";" " " shown "${ARGN}")
  message("-- package test: ${what}\n   ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${what} FAILED (exit ${rc})\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

if(CTG_PKG_MODE STREQUAL "install")
  file(REMOVE_RECURSE "${CTG_PKG_PREFIX}")
  set(cfg "")
  if(NOT CTG_PKG_CONFIG STREQUAL "")
    set(cfg --config "${CTG_PKG_CONFIG}")
  endif()
  run_step("install ctg" "${CMAKE_COMMAND}" --install "${CTG_PKG_BUILD_DIR}" --prefix "${CTG_PKG_PREFIX}" ${cfg})
  file(GLOB_RECURSE cfgfile "${CTG_PKG_PREFIX}/*/ctgConfig.cmake")
  file(GLOB_RECURSE verfile "${CTG_PKG_PREFIX}/*/ctgConfigVersion.cmake")
  if(NOT EXISTS "${CTG_PKG_PREFIX}/include/ctg/ctg.hpp" OR NOT cfgfile OR NOT verfile)
    message(FATAL_ERROR "package test: install is missing include/ctg/ctg.hpp, ctgConfig.cmake "
      "or ctgConfigVersion.cmake under ${CTG_PKG_PREFIX}")
  endif()
  message("package test: installed ctg into ${CTG_PKG_PREFIX}")
  return()
endif()

# ---- consumer: a fresh configure, a build, a run ----
file(REMOVE_RECURSE "${CTG_PKG_BINARY_DIR}")
set(args -S "${CTG_PKG_CONSUMER_DIR}" -B "${CTG_PKG_BINARY_DIR}"
  -G "${CTG_PKG_GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CTG_PKG_CXX_COMPILER}"
  "-DCTG_CONSUMER_MODE=${CTG_PKG_MODE}")
if(CTG_PKG_MAKE_PROGRAM)
  list(APPEND args "-DCMAKE_MAKE_PROGRAM=${CTG_PKG_MAKE_PROGRAM}")
endif()
if(NOT CTG_PKG_CONFIG STREQUAL "")
  list(APPEND args "-DCMAKE_BUILD_TYPE=${CTG_PKG_CONFIG}")
endif()
if(CTG_PKG_MODE STREQUAL "add_subdirectory")
  # CUDA off: the consumer only needs the headers, and probing for nvcc is slow.
  list(APPEND args "-DCTG_SOURCE_DIR=${CTG_PKG_SOURCE_DIR}" -DCTG_ENABLE_CUDA=OFF)
elseif(CTG_PKG_MODE STREQUAL "find_package")
  list(APPEND args "-DCMAKE_PREFIX_PATH=${CTG_PKG_PREFIX}" "-DCTG_EXPECTED_PREFIX=${CTG_PKG_PREFIX}")
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown CTG_PKG_MODE '${CTG_PKG_MODE}'")
endif()

run_step("configure consumer (${CTG_PKG_MODE})" "${CMAKE_COMMAND}" ${args})
message("${step_output}")
set(cfg "")
if(NOT CTG_PKG_CONFIG STREQUAL "")
  set(cfg --config "${CTG_PKG_CONFIG}")
endif()
run_step("build consumer" "${CMAKE_COMMAND}" --build "${CTG_PKG_BINARY_DIR}" ${cfg})
file(GLOB_RECURSE exe LIST_DIRECTORIES false "${CTG_PKG_BINARY_DIR}/ctg_consumer" "${CTG_PKG_BINARY_DIR}/ctg_consumer.exe")
if(NOT exe)
  message(FATAL_ERROR "package test: consumer executable not found under ${CTG_PKG_BINARY_DIR}")
endif()
list(GET exe 0 exe)
run_step("run consumer" "${exe}")
message("${step_output}")
