# Install layout and the Debian package.
#
#   bin/rdmasan                       the command
#   lib*/rdmasan/librdmasan.so        the shim (found by the command through
#                                     RDMASAN_LIB_FROM_BIN, never on the
#                                     loader's path: it is only ever preloaded)
#   include/rdmasan/*.h               the public interface headers
#   share/rdmasan/suppressions/       shipped suppression files
#   share/rdmasan/doc/                README, the rules, the trace format
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
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/RULES.md
              ${PROJECT_SOURCE_DIR}/traces/FORMAT.md
        DESTINATION ${RDMASAN_INSTALL_DATADIR}/doc COMPONENT rdmasan)

# `cpack -G DEB` (or `cmake --build build --target package`) in the build
# folder: rdmasan_<version>_<arch>.deb.  Its dependencies come from
# dpkg-shlibdeps (libibverbs1, libdw1, Abseil, libstdc++ ...), plus the
# programs `rdmasan devices` and the docs name.
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
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libibverbs1")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ibverbs-utils")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${PROJECT_HOMEPAGE_URL}")
include(CPack)
