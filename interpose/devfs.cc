// interpose/devfs: softnic0's device nodes and sysfs entries.  See devfs.h.
#include "interpose/devfs.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "interpose/interpose.h"
#include "softnic/softnic.h"

namespace sn = rdmasan::softnic;

namespace rdmasan::interpose::devfs {

namespace {

thread_local int t_real_scan = 0;

constexpr char kUverbsNode[] = "/dev/infiniband/uverbs-softnic0";
constexpr char kCmNode[] = "/dev/infiniband/rdma_cm";
constexpr char kDevDir[] = "/dev/infiniband";
constexpr char kIbClass[] = "/sys/class/infiniband";
constexpr char kVerbsClass[] = "/sys/class/infiniband_verbs";
constexpr char kIbDev[] = "/sys/class/infiniband/softnic0";
constexpr char kVerbsDev[] = "/sys/class/infiniband_verbs/uverbs-softnic0";
constexpr char kVerbsAbi[] = "/sys/class/infiniband_verbs/abi_version";

// `path` is `prefix` itself or lies below it.
bool Under(const char* path, const char* prefix, size_t plen) {
  return strncmp(path, prefix, plen) == 0 && (path[plen] == '\0' || path[plen] == '/');
}
bool Is(const char* path, const char* what, size_t n) {
  return strncmp(path, what, n) == 0 && (path[n] == '\0' || (path[n] == '/' && path[n + 1] == '\0'));
}

// Whether the host has `path` (asked of the kernel directly: the hooks
// would come back here).
bool HostHas(const char* path) { return syscall(SYS_faccessat, AT_FDCWD, path, F_OK) == 0; }

std::string* g_root = nullptr;  // the tree, once written ("" if it could not be)

void Put(const std::string& root, const std::string& rel, const std::string& text) {
  const std::string path = absl::StrCat(root, "/", rel);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
  if (fd < 0) return;
  const std::string line = text.empty() ? text : absl::StrCat(text, "\n");
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    // A short tree reads as a device without that attribute.
  }
  close(fd);
}

void Dir(const std::string& root, const std::string& rel) {
  mkdir(absl::StrCat(root, "/", rel).c_str(), 0700);
}

std::string Hex16(uint16_t v) {
  char b[8];
  snprintf(b, sizeof(b), "%04x", v);
  return b;
}

std::string Guid(__be64 g) {
  const uint64_t v = be64toh(g);
  return absl::StrCat(Hex16(v >> 48), ":", Hex16(v >> 32), ":", Hex16(v >> 16), ":", Hex16(v));
}

std::string Gid(const ibv_gid& g) {
  std::string s;
  for (int i = 0; i < 16; i += 2) {
    if (i) s += ":";
    s += Hex16(static_cast<uint16_t>(g.raw[i] << 8 | g.raw[i + 1]));
  }
  return s;
}

int RemoveOne(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

void RemoveTree() {
  if (g_root && !g_root->empty()) nftw(g_root->c_str(), RemoveOne, 16, FTW_DEPTH | FTW_PHYS);
}

// Removes the trees of processes that ended without their exit handler
// (SIGKILL, _exit): sys-<pid>-* whose pid is gone.
void SweepTrees(const std::string& base) {
  DIR* d = opendir(base.c_str());
  if (!d) return;
  while (const dirent* e = readdir(d)) {
    if (strncmp(e->d_name, "sys-", 4) != 0) continue;
    const long pid = strtol(e->d_name + 4, nullptr, 10);
    if (pid <= 0 || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string path = absl::StrCat(base, "/", e->d_name);
    nftw(path.c_str(), RemoveOne, 16, FTW_DEPTH | FTW_PHYS);
  }
  closedir(d);
}

const std::string& Tree() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_root = new std::string();
    std::string base;
    // The softnic folder of this user, private to it.
    if (!sn::UserPrivateDir(&base)) return;
    SweepTrees(base);
    char tmpl[4096];
    snprintf(tmpl, sizeof(tmpl), "%s/sys-%d-XXXXXX", base.c_str(), static_cast<int>(getpid()));
    if (!mkdtemp(tmpl)) return;
    const std::string root = tmpl;
    ibv_device_attr dev{};
    ibv_port_attr port{};
    bool have = false;
    if (ibv_context* ctx = sn::OpenDevice(sn::Device())) {
      have = sn::QueryDevice(ctx, &dev) == 0 && sn::QueryPort(ctx, 1, &port) == 0;
      if (have) {
        for (const char* rel :
             {"class", "class/infiniband", "class/infiniband/softnic0", "class/infiniband/softnic0/ports",
              "class/infiniband/softnic0/ports/1", "class/infiniband/softnic0/ports/1/gids",
              "class/infiniband/softnic0/ports/1/pkeys", "class/infiniband/softnic0/ports/1/gid_attrs",
              "class/infiniband/softnic0/ports/1/gid_attrs/types",
              "class/infiniband/softnic0/ports/1/gid_attrs/ndevs", "class/infiniband/softnic0/device",
              "class/infiniband/softnic0/device/net", "class/infiniband/softnic0/device/net/lo",
              "class/infiniband_verbs", "class/infiniband_verbs/uverbs-softnic0", "dev", "dev/infiniband"})
          Dir(root, rel);
        const std::string ib = "class/infiniband/softnic0/";
        Put(root, ib + "node_guid", Guid(dev.node_guid));
        Put(root, ib + "sys_image_guid", Guid(dev.sys_image_guid));
        Put(root, ib + "node_type", "1: CA");
        Put(root, ib + "node_desc", "softnic0 (rdmasan)");
        Put(root, ib + "fw_ver", dev.fw_ver);
        Put(root, ib + "hca_type", "softnic");
        Put(root, ib + "hw_rev", absl::StrCat(dev.hw_ver));
        Put(root, ib + "board_id", "RDMASAN_SOFTNIC");
        // softnic's rdma_cm serves this host's addresses: its net device
        // is the loopback interface.
        Put(root, ib + "device/net/lo/ifindex", "1");
        const std::string p = ib + "ports/1/";
        Put(root, p + "state", port.state == IBV_PORT_ACTIVE ? "4: ACTIVE" : "1: DOWN");
        Put(root, p + "phys_state", port.phys_state == 5 ? "5: LinkUp" : "3: Disabled");
        Put(root, p + "lid", absl::StrCat("0x", absl::Hex(port.lid)));
        Put(root, p + "sm_lid", absl::StrCat("0x", absl::Hex(port.sm_lid)));
        Put(root, p + "lid_mask_count", absl::StrCat(port.lmc));
        Put(root, p + "sm_sl", absl::StrCat(port.sm_sl));
        Put(root, p + "cap_mask", absl::StrCat("0x", absl::Hex(port.port_cap_flags, absl::kZeroPad8)));
        Put(root, p + "rate", "100 Gb/sec (4X EDR)");
        const bool eth = port.link_layer == IBV_LINK_LAYER_ETHERNET;
        Put(root, p + "link_layer", eth ? "Ethernet" : "InfiniBand");
        for (int i = 0; i < port.gid_tbl_len; ++i) {
          ibv_gid_entry e{};
          const int err = sn::QueryGidEx(ctx, 1, i, &e, 0, sizeof(e));
          if (err != 0 && err != ENODATA) break;
          Put(root, absl::StrCat(p, "gids/", i), Gid(e.gid));  // an empty entry reads as zeros
          // The kernel's files: an empty entry's type and netdev read
          // EINVAL; softnic's say what ibv_query_gid_type says of them.
          Put(root, absl::StrCat(p, "gid_attrs/types/", i),
              err == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1");
          char name[IF_NAMESIZE] = "";
          if (err == 0 && eth && e.ndev_ifindex && if_indextoname(e.ndev_ifindex, name))
            Put(root, absl::StrCat(p, "gid_attrs/ndevs/", i), name);
        }
        Put(root, p + "pkeys/0", "0xffff");
        const std::string uv = "class/infiniband_verbs/uverbs-softnic0/";
        Put(root, uv + "ibdev", "softnic0");
        Put(root, uv + "abi_version", "1");
        Put(root, uv + "dev", "231:192");
        Put(root, "class/infiniband_verbs/abi_version", "6");
        Put(root, "dev/infiniband/uverbs-softnic0", "");
        Put(root, "dev/infiniband/rdma_cm", "");
      }
      sn::CloseDevice(ctx);
    }
    if (!have) {
      RemoveOne(root.c_str(), nullptr, 0, nullptr);
      return;
    }
    *g_root = root;
    atexit(RemoveTree);
  });
  return *g_root;
}

Kind ToTree(const char* path, char* buf, size_t n) {
  const std::string& root = Tree();
  if (root.empty()) return Kind::kReal;
  const size_t rel = strlen("/sys");  // the tree mirrors /sys/class/...
  const char* tail = strncmp(path, "/sys/", 5) == 0 ? path + rel : path;
  if (static_cast<size_t>(snprintf(buf, n, "%s%s", root.c_str(), tail)) >= n) return Kind::kReal;
  return Kind::kTree;
}

}  // namespace

InRealScan::InRealScan() { ++t_real_scan; }
InRealScan::~InRealScan() { --t_real_scan; }
bool InRealScan::Active() { return t_real_scan > 0; }

Kind Map(const char* path, char* buf, size_t n) {
  if (!path || path[0] != '/' || (path[1] != 's' && path[1] != 'd')) return Kind::kReal;
  const bool dev = strncmp(path, kDevDir, sizeof(kDevDir) - 1) == 0;
  const bool sys = !dev && strncmp(path, kIbClass, sizeof(kIbClass) - 1) == 0;
  if (!dev && !sys) return Kind::kReal;
  if (t_real_scan > 0 || !SoftnicListed()) return Kind::kReal;
  if (dev) {
    if (Is(path, kUverbsNode, sizeof(kUverbsNode) - 1) || Is(path, kCmNode, sizeof(kCmNode) - 1))
      return Kind::kNode;
    if (Is(path, kDevDir, sizeof(kDevDir) - 1) && !HostHas(kDevDir)) return ToTree(path, buf, n);
    return Kind::kReal;
  }
  if (Under(path, kIbDev, sizeof(kIbDev) - 1) || Under(path, kVerbsDev, sizeof(kVerbsDev) - 1))
    return ToTree(path, buf, n);
  if ((Is(path, kIbClass, sizeof(kIbClass) - 1) || Is(path, kVerbsClass, sizeof(kVerbsClass) - 1) ||
       Is(path, kVerbsAbi, sizeof(kVerbsAbi) - 1)) &&
      !HostHas(path))
    return ToTree(path, buf, n);
  return Kind::kReal;
}

void NodeStat(const char* path, struct stat* st) {
  memset(st, 0, sizeof(*st));
  st->st_mode = S_IFCHR | 0666;
  st->st_nlink = 1;
  st->st_blksize = 4096;
  // uverbs' major; rdma_cm is a misc device.
  st->st_rdev = strcmp(path, kCmNode) == 0 ? makedev(10, 58) : makedev(231, 192);
}

}  // namespace rdmasan::interpose::devfs
