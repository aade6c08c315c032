include(GoogleTest)

set(GDNV_TEST_DATA ${PROJECT_SOURCE_DIR}/tests/data)

# gdnv_test(<name> SOURCES ... LIBS ... [PREFIX p]): a GoogleTest executable registered with ctest per
# test case, names prefixed with p (for suites shared by several executables).
function(gdnv_test name)
  cmake_parse_arguments(T "" "PREFIX" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main gdnv_warnings)
  target_compile_definitions(${name} PRIVATE GDNV_TEST_DATA="${GDNV_TEST_DATA}"
                                             GDNV_CLI="$<TARGET_FILE:gdn-verify>")
  add_dependencies(${name} gdn-verify)  # tests that run the real CLI need it built
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_PREFIX "${T_PREFIX}")
endfunction()

# gdnv_property(<name> SOURCES ... LIBS ... [MAX_SUCCESS n]): a RapidCheck suite; its main fixes the
# default seed and the default number of cases per property (100 unless MAX_SUCCESS says fewer, for
# suites whose cases run whole layers).
function(gdnv_property name)
  cmake_parse_arguments(T "" "MAX_SUCCESS" "SOURCES;LIBS" ${ARGN})
  if(NOT T_MAX_SUCCESS)
    set(T_MAX_SUCCESS 100)
  endif()
  add_executable(${name} ${T_SOURCES} ${PROJECT_SOURCE_DIR}/properties/rc_main.cpp)
  target_link_libraries(${name} PRIVATE ${T_LIBS} rapidcheck_gtest rapidcheck GTest::gtest gdnv_warnings)
  target_compile_definitions(${name} PRIVATE GDNV_TEST_DATA="${GDNV_TEST_DATA}" GDNV_RC_MAX_SUCCESS=${T_MAX_SUCCESS})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
endfunction()
