// Plugins: the example plugin loads and registers its namespace and its rewrite pattern; a missing file and a plugin that
// breaks a registration rule fail with messages naming the path and the op.
#include <gtest/gtest.h>

#include "symmflow/ops/library.hpp"
#include "symmflow/passes/rewrite_patterns.hpp"

namespace symmflow {
namespace {

const std::string kLibDir = std::string(SYMMFLOW_BIN_DIR) + "/lib/";

TEST(Plugin, ExampleRegistersItsOpAndRewritePattern) {
  load_plugin(kLibDir + "libmyops.so");
  const OpDef& op = Registry::global().get("myops::bias_gelu");
  EXPECT_EQ(op.schema().str(), "myops::bias_gelu(Tensor input, Tensor bias) -> Tensor");
  EXPECT_EQ(op.backends(), std::vector<Backend>{Backend::cpu});
  EXPECT_TRUE(op.symm_args().empty());
  std::vector<passes::RewritePattern> patterns = passes::registered_rewrite_patterns();
  ASSERT_EQ(patterns.size(), 1u);
  EXPECT_EQ(patterns[0].name, "myops::fuse_bias_gelu");
  EXPECT_EQ(patterns[0].root_op, "aten::gelu");
  load_plugin(kLibDir + "libmyops.so");  // loading twice is a no-op
  EXPECT_EQ(passes::registered_rewrite_patterns().size(), 1u);
}

TEST(Plugin, TagsItsOpsThroughDefAndTag) {
  load_plugin(kLibDir + "libtagged_plugin.so");
  EXPECT_EQ(Registry::global().get("taggedops::square").tags(), TagSet{Tag::pointwise});
  EXPECT_EQ(Registry::global().get("taggedops::push_").tags(),
            (TagSet{Tag::collective, Tag::peer_written, Tag::one_sided, Tag::signal,
                    Tag::in_place}));
}

TEST(Plugin, MissingFileNamesThePath) {
  try {
    load_plugin("/nonexistent/libnothing.so");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot load plugin '/nonexistent/libnothing.so': ", 0), 0u)
        << e.what();
  }
}

TEST(Plugin, RuleViolationNamesPluginAndOp) {
  try {
    load_plugin(kLibDir + "libbad_plugin.so");
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("plugin '" + kLibDir + "libbad_plugin.so' failed to register its ops"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("op 'badops::scale': symm arg 'y' is not an argument of its schema "
                       "(arguments: x, group_name)"),
              std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace symmflow
