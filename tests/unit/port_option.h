// Test helper: the softnic_port option (ib or roce), set for one test and
// put back after it.
#ifndef RDMASAN_TESTS_UNIT_PORT_OPTION_H_
#define RDMASAN_TESTS_UNIT_PORT_OPTION_H_

#include <string>

#include "core/options.h"

namespace rdmasan::testing {

class PortOption {
 public:
  explicit PortOption(const std::string& v) : old_(core::GlobalOptions().softnic_port) { Set(v); }
  ~PortOption() { Set(old_); }
  PortOption(const PortOption&) = delete;
  PortOption& operator=(const PortOption&) = delete;

 private:
  static void Set(const std::string& v) {
    const_cast<core::Options&>(core::GlobalOptions()).softnic_port = v;
  }
  std::string old_;
};

}  // namespace rdmasan::testing

#endif  // RDMASAN_TESTS_UNIT_PORT_OPTION_H_
