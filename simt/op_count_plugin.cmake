# simt/op_count_plugin.cmake: builds the GCC plugin that makes the emulated kernels count their
# arithmetic (simt/op_count_plugin.cpp, counters in simt/op_counts.h), when the compiler is GCC
# and its plugin headers are installed, and provides simt_count_ops(target) to compile a
# target with it. Included by the top-level CMakeLists.txt; the plugin's own test is in
# tests/CMakeLists.txt (test_op_counts). Sets TINYTRAIN_SIMT_OP_COUNTS ON or OFF in the including
# scope: include() opens no scope of its own, so a plain set() reaches the includer, and
# simt_count_ops called from a subdirectory still sees it.

set(SIMT_OP_COUNT_PLUGIN_SOURCE ${CMAKE_CURRENT_LIST_DIR}/op_count_plugin.cpp)

set(TINYTRAIN_SIMT_OP_COUNTS OFF)
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  message(STATUS "tinytrain: SIMT op counts OFF: the counting plugin is a GCC plugin, and the compiler is "
                 "${CMAKE_CXX_COMPILER_ID}")
else()
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=plugin
                  OUTPUT_VARIABLE simt_gcc_plugin_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE simt_gcc_plugin_dir_result)
  if(simt_gcc_plugin_dir_result EQUAL 0 AND EXISTS "${simt_gcc_plugin_dir}/include/gcc-plugin.h")
    set(TINYTRAIN_SIMT_OP_COUNTS ON)
  else()
    string(REGEX MATCH "^[0-9]+" simt_gcc_major "${CMAKE_CXX_COMPILER_VERSION}")
    message(STATUS "tinytrain: SIMT op counts OFF: no GCC plugin headers for ${CMAKE_CXX_COMPILER} "
                   "(${simt_gcc_plugin_dir}/include/gcc-plugin.h): install gcc-${simt_gcc_major}-plugin-dev")
  endif()
endif()

if(TINYTRAIN_SIMT_OP_COUNTS)
  add_library(simt_op_count_plugin MODULE ${SIMT_OP_COUNT_PLUGIN_SOURCE})
  # SYSTEM: GCC's own headers are not ours to warn about. The plugin runs inside cc1plus, so it
  # takes none of the project's directory-wide options (sanitizers): -fno-rtti as GCC itself
  # is built, -fPIC for a shared object.
  target_include_directories(simt_op_count_plugin SYSTEM PRIVATE ${simt_gcc_plugin_dir}/include)
  set_target_properties(simt_op_count_plugin PROPERTIES PREFIX "" COMPILE_OPTIONS "-fno-rtti;-fPIC;-Wall;-Wextra"
                        LINK_OPTIONS "" LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  # Its path spelled out, not $<TARGET_FILE:...>: OBJECT_DEPENDS takes no generator expressions
  # (CMake issue 22034). The project's generators (Ninja, Makefiles) are single-configuration,
  # so the file is right there.
  set(SIMT_OP_COUNT_PLUGIN_FILE ${CMAKE_CURRENT_BINARY_DIR}/simt_op_count_plugin${CMAKE_SHARED_MODULE_SUFFIX})
  # ccache hashes -fplugin's path, not the plugin: this definition changes with the plugin's
  # source, so every instrumented object is recompiled (and missed in the cache) when it does.
  file(MD5 ${SIMT_OP_COUNT_PLUGIN_SOURCE} SIMT_OP_COUNT_PLUGIN_MD5)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${SIMT_OP_COUNT_PLUGIN_SOURCE})
  message(STATUS "tinytrain: SIMT op counts ON (GCC plugin headers in ${simt_gcc_plugin_dir}/include)")
endif()

# Compiles every source of `target` with the counting plugin when it is available, and tells
# the code whether it is counted (TINYTRAIN_SIMT_OP_COUNTS=1 or 0: simt::op_counts_available).
function(simt_count_ops target)
  if(TINYTRAIN_SIMT_OP_COUNTS)
    target_compile_options(${target} PRIVATE -fplugin=${SIMT_OP_COUNT_PLUGIN_FILE})
    target_compile_definitions(${target} PRIVATE TINYTRAIN_SIMT_OP_COUNTS=1
                               TINYTRAIN_OP_COUNT_PLUGIN_MD5=${SIMT_OP_COUNT_PLUGIN_MD5})
    add_dependencies(${target} simt_op_count_plugin)
  else()
    target_compile_definitions(${target} PRIVATE TINYTRAIN_SIMT_OP_COUNTS=0)
  endif()
endfunction()
