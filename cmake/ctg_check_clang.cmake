# cmake -P script run by ctest (unit.clang): unit tests built with clang and run.
#   -DCTG_CLANG_CXX=<clang++, 18 or newer>  -DCTG_SOURCE_DIR=<ctg's root>  -DCTG_WORK_DIR=<scratch dir>
#   -DCTG_CLANG_UNITS=fusion|safetensors   (tests/unit/<name>.cpp)
# CI builds everything with g++; this keeps the headers compiling, warning-free
# (-Werror) and right under clang too. fusion is built for a target with FMA
# where the host is x86-64 (as unit.fusion_fma: no a*b+c contracted; it exits
# 77 on a CPU without FMA). Prints "ctg-skip:" (the test's skip pattern) when
# there is no clang 18 or newer to run.
cmake_minimum_required(VERSION 3.25)

if(NOT CTG_CLANG_CXX)
  message("ctg-skip: no clang++ found (Debian: clang-19); unit.clang not run")
  return()
endif()
execute_process(COMMAND ${CTG_CLANG_CXX} -dumpversion OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE)
if(version VERSION_LESS 18)
  message("ctg-skip: ${CTG_CLANG_CXX} is clang ${version}; ctg needs clang 18 or newer (P1907)")
  return()
endif()
message("clang: ${CTG_CLANG_CXX} ${version}")

file(MAKE_DIRECTORY ${CTG_WORK_DIR})
set(flags -std=c++20 -O2 -Wall -Wextra -Werror -I${CTG_SOURCE_DIR}/include -I${CTG_SOURCE_DIR}/tests/unit)
function(ctg_clang_run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "unit.clang: failed (${rc}): ${command}")
  endif()
endfunction()

ctg_clang_run(${CTG_CLANG_CXX} ${flags} -c ${CTG_SOURCE_DIR}/tests/unit/doctest_main.cxx -o ${CTG_WORK_DIR}/doctest_main.o)
string(REPLACE "|" ";" units "${CTG_CLANG_UNITS}")
execute_process(COMMAND uname -m OUTPUT_VARIABLE machine OUTPUT_STRIP_TRAILING_WHITESPACE)
foreach(unit IN LISTS units)
  set(extra)
  if(unit STREQUAL "fusion" AND machine MATCHES "x86_64|AMD64")
    set(extra -mavx2 -mfma -DCTG_TEST_TARGET_FMA=1)
  endif()
  set(exe ${CTG_WORK_DIR}/${unit})
  ctg_clang_run(${CTG_CLANG_CXX} ${flags} ${extra} ${CTG_SOURCE_DIR}/tests/unit/${unit}.cpp ${CTG_WORK_DIR}/doctest_main.o
                -o ${exe} -lpthread)
  execute_process(COMMAND ${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(rc EQUAL 77)
    message("ctg-skip: ${unit}: ${out}")
    return()
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "unit.clang: ${unit} failed (exit ${rc})")
  endif()
endforeach()
