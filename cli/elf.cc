#include "cli/elf.h"

#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdmasan::cli {
namespace {

constexpr size_t kMaxHeaders = 4096;      // program headers read at most
constexpr size_t kMaxDynamic = 1u << 16;  // dynamic entries read at most

class File {
 public:
  explicit File(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)) {
    struct stat st;
    if (fd_ >= 0 && fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() {
    if (fd_ >= 0) close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Reads `n` bytes at `off` into `out`; false if any lies past the end.
  bool Read(uint64_t off, void* out, size_t n) const {
    if (size_ == 0 || off > size_ || n > size_ - off) return false;
    return pread(fd_, out, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
  }
  // The NUL-terminated string at `off`, at most 4096 bytes; "" if unreadable.
  std::string String(uint64_t off) const {
    char buf[4096];
    const uint64_t left = off < size_ ? size_ - off : 0;
    const size_t n = left < sizeof buf ? static_cast<size_t>(left) : sizeof buf;
    if (n == 0 || !Read(off, buf, n)) return "";
    const void* end = memchr(buf, '\0', n);
    return end ? std::string(buf, static_cast<const char*>(end) - buf) : "";
  }

 private:
  int fd_;
  uint64_t size_ = 0;
};

}  // namespace

ElfInfo ReadElf(const std::string& path) {
  ElfInfo info;
  File f(path);
  Elf64_Ehdr eh;
  if (!f.Read(0, &eh, sizeof eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > kMaxHeaders)
    return info;
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!ph.empty() && !f.Read(eh.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr))) return info;
  info.elf = true;
  info.executable = eh.e_type == ET_EXEC || eh.e_type == ET_DYN;
  info.shared_object = eh.e_type == ET_DYN;
  const Elf64_Phdr* dynamic = nullptr;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type == PT_INTERP) info.interpreter = true;
    if (p.p_type == PT_DYNAMIC) dynamic = &p;
  }
  if (dynamic == nullptr) return info;
  // The string table is named by its address: find the file offset of the
  // loaded segment that holds it.
  const size_t count = static_cast<size_t>(dynamic->p_filesz / sizeof(Elf64_Dyn));
  if (count > kMaxDynamic) return info;
  std::vector<Elf64_Dyn> dyn(count);
  if (!f.Read(dynamic->p_offset, dyn.data(), count * sizeof(Elf64_Dyn))) return info;
  uint64_t strtab = 0;
  bool have_strtab = false;
  for (const Elf64_Dyn& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_STRTAB) {
      strtab = d.d_un.d_ptr;
      have_strtab = true;
    }
  }
  if (!have_strtab) return info;
  uint64_t strtab_off = 0;
  bool mapped = false;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type == PT_LOAD && strtab >= p.p_vaddr && strtab - p.p_vaddr < p.p_filesz) {
      strtab_off = p.p_offset + (strtab - p.p_vaddr);
      mapped = true;
      break;
    }
  }
  if (!mapped) return info;
  for (const Elf64_Dyn& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag != DT_NEEDED || d.d_un.d_val > UINT64_MAX - strtab_off) continue;
    std::string name = f.String(strtab_off + d.d_un.d_val);
    if (!name.empty()) info.needed.push_back(std::move(name));
  }
  return info;
}

std::string ResolveProgram(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  // glibc's execvp searches "/bin:/usr/bin" when PATH is unset.
  for (absl::string_view dir : absl::StrSplit(path ? path : "/bin:/usr/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return "";
}

std::vector<std::string> FirstRuntimes(const std::vector<std::string>& needed) {
  std::vector<std::string> out;
  for (const std::string& n : needed)
    if (absl::StartsWith(n, "libasan.so") || absl::StartsWith(n, "libtsan.so") ||
        absl::StartsWith(n, "libhwasan.so"))
      out.push_back(n);
  return out;
}

}  // namespace rdmasan::cli
