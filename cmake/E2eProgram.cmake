# E2eProgram.cmake: builds the small C programs of the end-to-end tests
# (tests/e2e/*) the ways users build theirs.  It only defines targets; the
# tests that run them stay in each folder's CMakeLists.txt.  It never adds
# rdmasan's own flags (-O3, alignment, its LTO: RDMASAN_OWN_OPTIONS) to a
# program, and never instruments one with a sanitizer.
#
# Build variants, by name:
#   O0      -g -O0 -fno-omit-frame-pointer   as a debugger would want it
#   O2      -O2 -g                           as users build
#   O2-lto  -O2 -g -flto (linked -flto)      as users build with LTO
# Every variant also gets -Wall -Wextra, C11 without GNU extensions, and
# libibverbs.  In the sanitizer builds the programs stay uninstrumented
# (-fno-sanitize=all), as users' programs are: the sanitizer runtime is
# preloaded under them (rdmasan_sanitizer_test_env), and an instrumented
# program would report some planted bugs itself before rdmasan can.
#
# rdmasan_e2e_program(<prefix> <source>
#                     [VARIANTS v...]       default: O0 O2 O2-lto
#                     [PLAIN_VARIANT v]     the variant without a suffix (default O0)
#                     [INCLUDE_DIRS d...]
#                     [DEFINITIONS d...]    compile definitions (NAME=value)
#                     [MODULE]              a plugin (add_library MODULE), not a program
#                     [NO_IBVERBS]          not linked against libibverbs (a loader
#                                           that dlopens it; verbs.h still found)
#                     [OUT <var>])
# Target names: <prefix> for PLAIN_VARIANT, <prefix>_O2, <prefix>_O2_lto
# for the others ('-' becomes '_').  With OUT, sets in the caller's scope:
#   <var>                   the variants built, in order
#   <var>_TARGET_<variant>  that variant's target
#   <var>_SUFFIX_<variant>  the suffix of its test names: "" for
#                           PLAIN_VARIANT, ".O2", ".O2-lto" otherwise
include_guard(GLOBAL)

set(RDMASAN_E2E_VARIANTS O0 O2 O2-lto)
set(RDMASAN_E2E_FLAGS_O0 -g -O0 -fno-omit-frame-pointer)
set(RDMASAN_E2E_FLAGS_O2 -O2 -g)
set(RDMASAN_E2E_FLAGS_O2-lto -O2 -g -flto)
set(RDMASAN_E2E_LINK_FLAGS_O0)
set(RDMASAN_E2E_LINK_FLAGS_O2)
set(RDMASAN_E2E_LINK_FLAGS_O2-lto -flto)

function(rdmasan_e2e_program prefix src)
  cmake_parse_arguments(A "MODULE;NO_IBVERBS" "PLAIN_VARIANT;OUT" "VARIANTS;INCLUDE_DIRS;DEFINITIONS" ${ARGN})
  if(A_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "rdmasan_e2e_program(${prefix}): unknown arguments '${A_UNPARSED_ARGUMENTS}'")
  endif()
  if(NOT A_VARIANTS)
    set(A_VARIANTS ${RDMASAN_E2E_VARIANTS})
  endif()
  if(NOT A_PLAIN_VARIANT)
    set(A_PLAIN_VARIANT O0)
  endif()
  set(built)
  foreach(variant IN LISTS A_VARIANTS)
    if(NOT variant IN_LIST RDMASAN_E2E_VARIANTS)
      message(FATAL_ERROR "rdmasan_e2e_program(${prefix}): unknown variant '${variant}' "
                          "(one of: ${RDMASAN_E2E_VARIANTS})")
    endif()
    if(variant STREQUAL A_PLAIN_VARIANT)
      set(target ${prefix})
      set(suffix "")
    else()
      string(REPLACE "-" "_" tsuffix "${variant}")
      set(target ${prefix}_${tsuffix})
      set(suffix ".${variant}")
    endif()
    set(cflags ${RDMASAN_E2E_FLAGS_${variant}})
    set(lflags ${RDMASAN_E2E_LINK_FLAGS_${variant}})
    if(RDMASAN_SANITIZE)
      list(APPEND cflags -fno-sanitize=all)
      list(APPEND lflags -fno-sanitize=all)
    endif()
    if(A_MODULE)
      add_library(${target} MODULE ${src})
    else()
      add_executable(${target} ${src})
    endif()
    if(A_NO_IBVERBS)
      target_include_directories(${target} PRIVATE ${IBVERBS_INCLUDE_DIRS})
      target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS})
    else()
      target_link_libraries(${target} PRIVATE PkgConfig::IBVERBS)
    endif()
    if(A_DEFINITIONS)
      target_compile_definitions(${target} PRIVATE ${A_DEFINITIONS})
    endif()
    set_target_properties(${target} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
    target_compile_options(${target} PRIVATE ${cflags} -Wall -Wextra)
    if(lflags)
      target_link_options(${target} PRIVATE ${lflags})
    endif()
    if(A_INCLUDE_DIRS)
      target_include_directories(${target} PRIVATE ${A_INCLUDE_DIRS})
    endif()
    list(APPEND built ${variant})
    if(A_OUT)
      set(${A_OUT}_TARGET_${variant} ${target} PARENT_SCOPE)
      set(${A_OUT}_SUFFIX_${variant} "${suffix}" PARENT_SCOPE)
    endif()
  endforeach()
  if(A_OUT)
    set(${A_OUT} ${built} PARENT_SCOPE)
  endif()
endfunction()
