// InternedName (devices/interned_name.h): equal names share one string, whichever thread made
// them, and an InternedName reads like the string it holds.
#include "devices/interned_name.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TEST(InternedName, EqualNamesShareOneString) {
  const InternedName a("aten::empty_strided"), b(std::string("aten::empty_") + "strided");
  EXPECT_EQ(&a.str(), &b.str());
  EXPECT_TRUE(a == b);
  const InternedName c("aten::empty");
  EXPECT_NE(&a.str(), &c.str());
  EXPECT_TRUE(a != c);
  EXPECT_TRUE(InternedName().empty());
  EXPECT_EQ(&InternedName().str(), &InternedName("").str());
}

TEST(InternedName, ReadsLikeItsString) {
  InternedName n = "aten::mul";
  EXPECT_TRUE(n == "aten::mul");
  EXPECT_TRUE(n != std::string("aten::mul_"));
  EXPECT_EQ(n + "_", "aten::mul_");
  EXPECT_EQ("op " + n, "op aten::mul");
  EXPECT_EQ(n.size(), 9u);
  const std::string& s = n;
  EXPECT_EQ(s, "aten::mul");
  n = n + "_";
  EXPECT_EQ(n.str(), "aten::mul_");
}

TEST(InternedName, ThreadsInterningTheSameNamesGetTheSameStrings) {
  std::vector<const std::string*> seen(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t)
    threads.emplace_back([&seen, t] {
      for (int i = 0; i < 1000; ++i) InternedName("aten::op" + std::to_string(i));
      seen[t] = &InternedName("aten::op500").str();
    });
  for (auto& t : threads) t.join();
  for (const std::string* s : seen) EXPECT_EQ(s, seen[0]);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
