// The api's op catalogue, schema checks and tunables as data (symmflow/api/catalogue.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "symmflow/symmflow.hpp"

namespace sf = symmflow::api;

TEST(ApiCatalogue, ListsOpsWithSchemaBackendsVariantsAndSymmArgs) {
  std::vector<sf::OpInfo> ops = sf::list_ops("symm_mem");
  auto it = std::find_if(ops.begin(), ops.end(),
                         [](const sf::OpInfo& o) { return o.name == "symm_mem::one_shot_all_reduce"; });
  ASSERT_NE(it, ops.end());
  EXPECT_EQ(it->schema.rfind("symm_mem::one_shot_all_reduce(", 0), 0u) << it->schema;
  EXPECT_EQ(it->symm_args, (std::vector<std::string>{"input"}));
  EXPECT_EQ(it->group_arg, "group_name");
  EXPECT_EQ(it->out, "symm_mem::one_shot_all_reduce_out");
  EXPECT_NE(std::find(it->backends.begin(), it->backends.end(), "cpu"), it->backends.end());
  std::vector<std::string> ns = sf::op_namespaces();
  EXPECT_NE(std::find(ns.begin(), ns.end(), "aten"), ns.end());
  EXPECT_GT(sf::list_ops().size(), ops.size());
  try {
    sf::list_ops("nope");
    FAIL();
  } catch (const symmflow::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("no ops in namespace 'nope' (namespaces: ", 0), 0u);
  }
}

TEST(ApiCatalogue, ChecksSchemas) {
  sf::SchemaReport r = sf::check_schema("good_(Tensor(a!) x) -> ()");
  EXPECT_EQ(r.schema, "good_(Tensor(a!) x) -> ()");
  EXPECT_TRUE(r.is_mutable);
  EXPECT_EQ(r.written, (std::vector<std::string>{"x"}));
  EXPECT_TRUE(r.returns.empty());
  EXPECT_FALSE(r.is_view);
  EXPECT_THROW(sf::check_schema("f(Tensr x) -> ()"), symmflow::Error);
}

TEST(ApiCatalogue, TunablesAsData) {
  std::vector<sf::Tunable> t = sf::tunables();
  auto it = std::find_if(t.begin(), t.end(), [](const sf::Tunable& x) { return x.env == "SYMMFLOW_TIMEOUT_S"; });
  ASSERT_NE(it, t.end());
  EXPECT_EQ(it->name, "timeout_s");
  EXPECT_FALSE(it->doc.empty());
}

TEST(ApiCatalogue, EagerBlockMatchesItsReference) {
  sf::EagerBlockResult r = sf::run_eager_mlp_block(symmflow::DType::f32);
  EXPECT_EQ(r.m, 16);
  EXPECT_EQ(r.median_us.size(), 4u);
  EXPECT_LE(r.worst_rel_error, 1e-4);
}
