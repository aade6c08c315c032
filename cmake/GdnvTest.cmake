include(GoogleTest)

set(GDNV_TEST_DATA ${PROJECT_SOURCE_DIR}/tests/data)

# gdnv_test(<name> SOURCES ... LIBS ...): a GoogleTest executable registered with ctest per test case.
function(gdnv_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main gdnv_warnings)
  target_compile_definitions(${name} PRIVATE GDNV_TEST_DATA="${GDNV_TEST_DATA}"
                                             GDNV_CLI="$<TARGET_FILE:gdn-verify>")
  add_dependencies(${name} gdn-verify)  # tests that run the real CLI need it built
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
endfunction()

# gdnv_property(<name> SOURCES ... LIBS ...): a RapidCheck suite; its main fixes the default seed.
function(gdnv_property name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} gdnv_rc_main rapidcheck_gtest rapidcheck GTest::gtest gdnv_warnings)
  target_compile_definitions(${name} PRIVATE GDNV_TEST_DATA="${GDNV_TEST_DATA}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
endfunction()
