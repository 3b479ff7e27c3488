# Install layout and the Debian package.
#
#   bin/rdmasan                       the command
#   lib*/rdmasan/librdmasan.so        the shim (found by the command through
#                                     RDMASAN_LIB_FROM_BIN, never on the
#                                     loader's path: it is only ever preloaded)
#   include/rdmasan/*.h               the public interface headers
#   share/rdmasan/suppressions/       shipped suppression files
#   share/doc/rdmasan/                the user documentation as in the source
#                                     tree: README.md, CHANGELOG.md,
#                                     CONTRIBUTING.md, LICENSE, LICENSES/,
#                                     docs/ (with docs/examples/),
#                                     traces/FORMAT.md, examples/ci/
#   share/man/man1/rdmasan.1          generated from the option, check and
#                                     command tables (cli/)
#
# The targets' own install() rules live with them (cli/, interpose/); what
# has no target is installed here.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/rdmasan
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT rdmasan)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/suppressions/
        DESTINATION ${RDMASAN_INSTALL_DATADIR}/suppressions COMPONENT rdmasan
        FILES_MATCHING PATTERN "*.supp")
# The pages keep their places relative to README.md, so its links to docs/
# and docs' links to ../traces/FORMAT.md work in the installed folder too.
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md
              ${PROJECT_SOURCE_DIR}/CONTRIBUTING.md ${PROJECT_SOURCE_DIR}/LICENSE
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT rdmasan)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/LICENSES ${PROJECT_SOURCE_DIR}/docs
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT rdmasan)
install(FILES ${PROJECT_SOURCE_DIR}/traces/FORMAT.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/traces COMPONENT rdmasan)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ci
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT rdmasan USE_SOURCE_PERMISSIONS)

# `cpack -G DEB` (or `cmake --build build --target package`) in the build
# folder: rdmasan_<version>_<arch>.deb.  Its dependencies come from
# dpkg-shlibdeps (libibverbs1, Abseil ...), plus libdw1, which the shim and
# the command load with dlopen to symbolize (core/stack_symbolize.cc), and
# the programs `rdmasan devices` and the docs name.
set(CPACK_PACKAGE_NAME rdmasan)
set(CPACK_PACKAGE_VENDOR "rdmasan developers")
set(CPACK_PACKAGE_CONTACT "rdmasan developers <rdmasan@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION
    "rdmasan preloads a shim under unmodified RDMA verbs programs, checks the verbs rules at every call and reports every breach with stacks. It carries softnic, a user-space RDMA device, so programs run and are checked on machines with no RDMA hardware.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libibverbs1, libdw1")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ibverbs-utils")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${PROJECT_HOMEPAGE_URL}")
include(CPack)
