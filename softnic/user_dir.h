// softnic/user_dir: the one directory where softnic keeps a user's files
// (fabric files, rdma_cm folders, the emulated sysfs tree), and the checks
// that keep them the user's alone.
//
// Every process of a user picks it the same way, so they meet there:
//   1. RDMASAN_SOFTNIC_DIR set: <that>/rdmasan-<euid>.d;
//   2. else $XDG_RUNTIME_DIR/rdmasan, when XDG_RUNTIME_DIR is an absolute
//      path to a directory (not a symlink) of this euid, with no group or
//      other permission, on a memory file system (tmpfs, ramfs);
//   3. else /run/user/<euid>/rdmasan on the same terms (the runtime
//      directory logind makes: a process whose environment lost the
//      variable, under sudo -u, su or cron, still finds it);
//   4. else /dev/shm/rdmasan-<euid>.d.
// In 2 and 3 nobody else can create anything.  In 1 and 4 the name is
// predictable, and another user may have made it first (a directory, a
// file, a link): then the directory is <base>/rdmasan-<euid>.<12 hex>, a
// random name nobody could take first, which every process of the user
// finds again as the least name of that shape that is a private directory
// of its own (made under an flock on <base>, held at most a second, so
// that two first processes make one).  A process says so once.
// A pair whose environments differ (one with XDG_RUNTIME_DIR naming a
// directory that is not /run/user/<euid>, one without; one with
// RDMASAN_SOFTNIC_DIR, one without) picks two places and does not meet:
// give both the same RDMASAN_SOFTNIC_DIR.  Another euid (sudo as root) is
// another user: its XDG_RUNTIME_DIR is not its own and is ignored, and it
// never met the user's processes anyway.
//
// May not: follow a symlink, use a directory or file that another user
// made or can reach, or judge one by its name rather than its fstat/lstat.
#ifndef RDMASAN_SOFTNIC_USER_DIR_H_
#define RDMASAN_SOFTNIC_USER_DIR_H_

#include <sys/stat.h>

#include <string>

#include "softnic/softnic.h"

namespace rdmasan::softnic {

// The user directory itself: UserPrivateDir (softnic.h).

// Whether `st` is of `type`, this user's (euid), and reachable by nobody
// else.
bool IsPrivate(const struct stat& st, mode_t type);

// Why `path` is not a private `type` of this user, in words.
std::string WhyNotOurs(const std::string& path, mode_t type);

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_USER_DIR_H_
