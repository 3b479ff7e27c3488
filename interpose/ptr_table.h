// interpose/ptr_table: application pointer -> 64-bit value, read on the data
// path without a lock (core::IdTable keyed by address).
#ifndef RDMASAN_INTERPOSE_PTR_TABLE_H_
#define RDMASAN_INTERPOSE_PTR_TABLE_H_

#include "core/id_table.h"

namespace rdmasan::interpose {

class PtrTable {
 public:
  bool Put(const void* p, uint64_t value) { return table_.Put(Key(p), value); }
  uint64_t Get(const void* p) const { return table_.Get(Key(p)); }  // 0 when absent
  void Erase(const void* p) { table_.Erase(Key(p)); }

 private:
  static uint64_t Key(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  core::IdTable table_;
};

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_PTR_TABLE_H_
