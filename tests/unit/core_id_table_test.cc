// core::IdTable and core::DenseIdTable: what a lookup answers after puts,
// overwrites and erasures, a full table, tables side by side, and readers
// that run while a writer fills the table.
#include "core/id_table.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace rdmasan {
namespace {

constexpr uint64_t kSlots = 1 << 16;  // IdTable's capacity

TEST(IdTable, PutGetEraseAndReuse) {
  auto t = std::make_unique<core::IdTable>();
  EXPECT_EQ(t->Get(42), 0u);
  EXPECT_TRUE(t->Put(42, 7));
  EXPECT_EQ(t->Get(42), 7u);
  EXPECT_TRUE(t->Put(42, 8));  // an overwrite, not a second slot
  EXPECT_EQ(t->Get(42), 8u);
  t->Erase(42);
  EXPECT_EQ(t->Get(42), 0u);
  EXPECT_TRUE(t->Put(42, 9));  // the tombstone is reused
  EXPECT_EQ(t->Get(42), 9u);
  EXPECT_FALSE(t->Put(0, 1));
  EXPECT_FALSE(t->Put(~uint64_t{0}, 1));
  EXPECT_EQ(t->Get(0), 0u);
  EXPECT_EQ(t->Get(~uint64_t{0}), 0u);
}

TEST(IdTable, FillsToCapacityThenRefuses) {
  auto t = std::make_unique<core::IdTable>();
  for (uint64_t k = 1; k <= kSlots; ++k) ASSERT_TRUE(t->Put(k * 0x1000, k)) << k;
  EXPECT_FALSE(t->Put(0xdead0001, 1));
  for (uint64_t k = 1; k <= kSlots; ++k) ASSERT_EQ(t->Get(k * 0x1000), k) << k;
  EXPECT_EQ(t->Get(0xdead0001), 0u);
  t->Erase(0x1000);
  EXPECT_TRUE(t->Put(0xdead0001, 5));
  EXPECT_EQ(t->Get(0xdead0001), 5u);
  EXPECT_EQ(t->Get(0x1000), 0u);
}

TEST(IdTable, TablesAreIndependent) {
  auto a = std::make_unique<core::IdTable>();
  auto b = std::make_unique<core::IdTable>();
  EXPECT_TRUE(a->Put(5, 50));
  EXPECT_TRUE(b->Put(5, 51));
  EXPECT_TRUE(b->Put(6, 61));
  EXPECT_EQ(a->Get(5), 50u);
  EXPECT_EQ(a->Get(6), 0u);
  EXPECT_EQ(b->Get(5), 51u);
}

// Readers never see a key with another key's value, nor lose a key once
// its Put returned.
TEST(IdTable, ReadersDuringPuts) {
  auto t = std::make_unique<core::IdTable>();
  constexpr uint64_t kKeys = 20000;
  std::atomic<uint64_t> published{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      uint64_t seen = 0;
      while (seen < kKeys) {
        seen = published.load(std::memory_order_acquire);
        for (uint64_t k = 1; k <= seen; k += 97) {
          uint64_t v = t->Get(k * 3 + 1);
          if (v != k) wrong.fetch_add(1);
        }
      }
    });
  }
  for (uint64_t k = 1; k <= kKeys; ++k) {
    ASSERT_TRUE(t->Put(k * 3 + 1, k));
    published.store(k, std::memory_order_release);
  }
  for (auto& th : readers) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(DenseIdTable, SmallAndLargeIds) {
  auto t = std::make_unique<core::DenseIdTable>();
  EXPECT_TRUE(t->Put(1, 10));
  EXPECT_TRUE(t->Put(5000, 20));               // another chunk
  EXPECT_TRUE(t->Put(uint64_t{1} << 40, 30));  // past the direct range: the sparse table
  EXPECT_EQ(t->Get(1), 10u);
  EXPECT_EQ(t->Get(5000), 20u);
  EXPECT_EQ(t->Get(uint64_t{1} << 40), 30u);
  EXPECT_EQ(t->Get(2), 0u);
  EXPECT_EQ(t->Get(uint64_t{1} << 41), 0u);
  t->Erase(uint64_t{1} << 40);
  t->Erase(1);
  EXPECT_EQ(t->Get(uint64_t{1} << 40), 0u);
  EXPECT_EQ(t->Get(1), 0u);
  EXPECT_FALSE(t->Put(0, 1));
}

}  // namespace
}  // namespace rdmasan
