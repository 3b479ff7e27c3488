// interpose/devfs: softnic0 as the file system shows a device, for
// programs that look before they open (UCX stats /dev/infiniband/<dev> and
// hides a device whose node is missing; Open MPI and hwloc list
// /sys/class/infiniband).  While softnic is listed (SoftnicListed), the
// path-taking libc calls the preloaded library hooks (fs_hooks.cc) ask Map:
//  - /dev/infiniband/uverbs-softnic0 and /dev/infiniband/rdma_cm are
//    character devices (stat, access); /dev/infiniband is a folder when the
//    host has none;
//  - /sys/class/infiniband/softnic0/..., /sys/class/infiniband_verbs/
//    uverbs-softnic0/... (and the two class folders, where the host has
//    none) are read from a tree this process writes once, on first use, in
//    the user's private softnic folder (removed at exit): node_guid,
//    node_type, fw_ver, hca_type, ports/1/{state,phys_state,lid,
//    link_layer,rate,gids/N,pkeys/0,gid_attrs/types/N}, device/net/lo
//    (softnic's rdma_cm serves this host's own addresses: its net device
//    is the loopback interface), ibdev, abi_version, dev, with the values
//    ibv_query_device/port/gid give.
// libibverbs' own scan of sysfs (the real ibv_get_device_list, inside the
// shim) sees the host as it is: InRealScan.
//
// May not: change what any other path shows, create anything outside the
// private folder, or write the tree more than once per process.
#ifndef RDMASAN_INTERPOSE_DEVFS_H_
#define RDMASAN_INTERPOSE_DEVFS_H_

#include <sys/stat.h>

#include <cstddef>

namespace rdmasan::interpose::devfs {

enum class Kind {
  kReal,  // not softnic's: use the path as given
  kNode,  // a softnic device node: no file behind it
  kTree,  // read it from the tree: the path is in the caller's buffer
};

// What `path` is; for kTree, the path to use instead is written to `buf`.
Kind Map(const char* path, char* buf, size_t n);

// A device node's stat: a character device, readable and writable by all.
void NodeStat(const char* path, struct stat* st);

// Set while the shim runs libibverbs' own ibv_get_device_list.
class InRealScan {
 public:
  InRealScan();
  ~InRealScan();
  static bool Active();
};

}  // namespace rdmasan::interpose::devfs

#endif  // RDMASAN_INTERPOSE_DEVFS_H_
