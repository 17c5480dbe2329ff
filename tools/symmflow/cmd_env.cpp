// `symmflow env`: the tunables table (api::tunables): environment variable, value in force,
// default and doc, one row each; `--json` prints the same as a list of objects
// {name, env, value, default, doc, set}. A variable that does not parse is an error naming it
// (exit 1).
#include <algorithm>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {

int run_env(bool json) {
  std::vector<api::Tunable> table = api::tunables();  // throws naming a bad variable
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const api::Tunable& t : table) {
      out.push_back({{"name", t.name}, {"env", t.env}, {"value", t.value},
                     {"default", t.default_value}, {"doc", t.doc}, {"set", t.set}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  size_t w_env = 8, w_value = 5, w_default = 7;
  for (const api::Tunable& t : table) {
    w_env = std::max(w_env, t.env.size());
    w_value = std::max(w_value, t.value.size() + 1);
    w_default = std::max(w_default, t.default_value.size());
  }
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", "VARIABLE", w_env, "VALUE", w_value, "DEFAULT",
             w_default, "DESCRIPTION");
  for (const api::Tunable& t : table) {
    // '*' marks a value set in the environment.
    std::string value = t.value + (t.set ? "*" : "");
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", t.env, w_env, value, w_value, t.default_value,
               w_default, t.doc);
  }
  fmt::print("\n* set in the environment\n");
  return 0;
}

}  // namespace

Command add_env_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("env", "Print the tunables (SYMMFLOW_* variables) in force");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print a JSON list");
  return {sub, [json] { return run_env(*json); }};
}

}  // namespace symmflow::tool
