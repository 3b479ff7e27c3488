# librdmasan.so takes Abseil and libstdc++ in statically (issue 33: start-up).
#
# Every program started under the shim paid for loading its 40 shared
# libraries: 30 of Abseil's, libstdc++ (3,300 symbol relocations of its
# own), elfutils' five (now loaded only to symbolize:
# core/stack_symbolize.cc).  `ibv_devices` under the shim ran 6.1 M
# instructions, 0.44 M bare; the shim's own code was under 1 % of that.
#
# Debian's Abseil archives are compiled position-independent for
# executables (-fPIE), which a shared library can take in when the symbols
# they reference are its own (the version script keeps them local), except
# for what static_absl.cc lists: local-exec thread_locals (raw_hash_set,
# cordz_functions stay shared libraries; sysinfo.cc.o is dropped from a
# copy of libabsl_base.a, its two functions the shim needs defined in
# static_absl.cc) and libabsl_str_format_internal.a's PC-relative read of
# libc's `stderr` (renamed in a copy of the archive).  The archives go in
# one group ahead of the imported shared Abseil targets, which
# --as-needed then drops.
#
# Used when every archive is installed and the Abseil is Debian's
# 20220623 (the objects named above are that release's); otherwise the
# shim links the shared libraries as before.  Not in sanitizer or fuzz
# builds (their runtimes want the shared C++ library).
set(RDMASAN_SHIM_STATIC_ABSL OFF)
get_target_property(rdmasan_shim_absl_so absl::base IMPORTED_LOCATION_NONE)
get_filename_component(rdmasan_shim_absl_dir "${rdmasan_shim_absl_so}" DIRECTORY)
set(rdmasan_shim_tls_archives base str_format_internal raw_hash_set cordz_functions random_internal_pool_urbg)
foreach(name base str_format_internal)
  if(NOT EXISTS "${rdmasan_shim_absl_dir}/libabsl_${name}.a")
    set(rdmasan_shim_absl_so "")
  endif()
endforeach()
find_library(RDMASAN_ABSL_RAW_HASH_SET_SO NAMES libabsl_raw_hash_set.so.20220623 PATHS "${rdmasan_shim_absl_dir}"
             NO_DEFAULT_PATH)
find_library(RDMASAN_ABSL_CORDZ_FUNCTIONS_SO NAMES libabsl_cordz_functions.so.20220623
             PATHS "${rdmasan_shim_absl_dir}" NO_DEFAULT_PATH)
if(rdmasan_shim_absl_so MATCHES "\\.so\\.20220623" AND RDMASAN_ABSL_RAW_HASH_SET_SO AND RDMASAN_ABSL_CORDZ_FUNCTIONS_SO
   AND CMAKE_OBJCOPY AND CMAKE_AR)
  set(RDMASAN_SHIM_STATIC_ABSL ON)
endif()

if(RDMASAN_SHIM_STATIC_ABSL)
  file(GLOB rdmasan_shim_absl_archives "${rdmasan_shim_absl_dir}/libabsl_*.a")
  foreach(name ${rdmasan_shim_tls_archives})
    list(REMOVE_ITEM rdmasan_shim_absl_archives "${rdmasan_shim_absl_dir}/libabsl_${name}.a")
  endforeach()
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/static_absl)
  add_custom_command(
    OUTPUT ${dir}/libabsl_base.a ${dir}/libabsl_str_format_internal.a
    COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
    COMMAND ${CMAKE_COMMAND} -E copy ${rdmasan_shim_absl_dir}/libabsl_base.a ${dir}/libabsl_base.a
    COMMAND ${CMAKE_AR} d ${dir}/libabsl_base.a sysinfo.cc.o
    COMMAND ${CMAKE_OBJCOPY} --redefine-sym stderr=rdmasan_absl_stderr
            ${rdmasan_shim_absl_dir}/libabsl_str_format_internal.a ${dir}/libabsl_str_format_internal.a
    DEPENDS ${rdmasan_shim_absl_dir}/libabsl_base.a ${rdmasan_shim_absl_dir}/libabsl_str_format_internal.a
    COMMENT "Abseil archives for librdmasan.so (static_absl.cmake)")
  add_custom_target(rdmasan_static_absl DEPENDS ${dir}/libabsl_base.a ${dir}/libabsl_str_format_internal.a)
  add_dependencies(rdmasan_preload rdmasan_static_absl)
  target_sources(rdmasan_preload PRIVATE static_absl.cc)
  target_link_libraries(rdmasan_preload PRIVATE
    -Wl,--start-group ${rdmasan_shim_absl_archives} ${dir}/libabsl_base.a ${dir}/libabsl_str_format_internal.a
    -Wl,--end-group ${RDMASAN_ABSL_RAW_HASH_SET_SO} ${RDMASAN_ABSL_CORDZ_FUNCTIONS_SO})
  target_link_options(rdmasan_preload PRIVATE -static-libstdc++ -Wl,--as-needed)
  set_property(TARGET rdmasan_preload APPEND PROPERTY LINK_DEPENDS ${dir}/libabsl_base.a
                                                                   ${dir}/libabsl_str_format_internal.a)
  unset(dir)
else()
  message(STATUS "rdmasan: Debian's Abseil 20220623 archives not found: librdmasan.so links Abseil shared "
                 "(slower start-up of programs under it)")
endif()
