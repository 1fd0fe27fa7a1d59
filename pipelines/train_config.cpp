#include "pipelines/train_config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/device/device.h"
#include "core/device/precision.h"
#include "core/error.h"
#include "core/plan/plan.h"
#include "io/user_file.h"
#include "models/zoo.h"

namespace tessel::pipelines {
namespace {

// Reads one key's value into the config; `where` names file and key for messages.
using Setter = std::function<void(TrainConfig&, const YAML::Node&, const std::string& where)>;

template <typename T>
T scalar(const YAML::Node& node, const std::string& where, const char* expected) {
  if (!node.IsScalar()) throw Error(where + ": expected " + expected);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    throw Error(where + ": expected " + expected + ", got '" + node.Scalar() + "'");
  }
}

bool is_null(const YAML::Node& node) {
  return node.IsNull() || (node.IsScalar() && (node.Scalar() == "~" || node.Scalar() == "null" ||
                                               node.Scalar().empty()));
}

template <typename T>
Setter set(T TrainConfig::*member, const char* expected) {
  return [member, expected](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    c.*member = scalar<T>(n, where, expected);
  };
}

template <typename T>
Setter set_optional(std::optional<T> TrainConfig::*member, const char* expected) {
  return [member, expected](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    if (is_null(n)) {
      c.*member = std::nullopt;
    } else {
      c.*member = scalar<T>(n, where, expected);
    }
  };
}

Setter set_path(std::filesystem::path TrainConfig::*member) {
  return [member](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    c.*member = is_null(n) ? std::string() : scalar<std::string>(n, where, "a path");
  };
}

// "10x", "20X", "40" → 10, 20, 40.
Setter set_magnification() {
  return [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    if (is_null(n)) {
      c.magnification = std::nullopt;
      return;
    }
    std::string text = scalar<std::string>(n, where, "a magnification such as 10x");
    if (!text.empty() && (text.back() == 'x' || text.back() == 'X')) text.pop_back();
    try {
      size_t used = 0;
      c.magnification = std::stod(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      throw Error(where + ": expected a magnification such as 10x, got '" + n.Scalar() + "'");
    }
  };
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"manifest", set_path(&TrainConfig::manifest)},
      {"classes",
       [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
         c.classes.clear();
         if (is_null(n)) return;
         if (!n.IsSequence()) throw Error(where + ": expected a list of class names");
         for (const YAML::Node& item : n)
           c.classes.push_back(scalar<std::string>(item, where, "a class name"));
       }},
      {"val_fraction", set(&TrainConfig::val_fraction, "a number")},
      {"test_fraction", set(&TrainConfig::test_fraction, "a number")},
      {"mpp", set_optional(&TrainConfig::mpp, "microns per pixel, a number")},
      {"magnification", set_magnification()},
      {"level", set_optional(&TrainConfig::level, "a level index")},
      {"base_mpp", set_optional(&TrainConfig::base_mpp, "microns per pixel, a number")},
      {"tissue_bbox", set(&TrainConfig::tissue_bbox, "true or false")},
      {"tissue_fill", set(&TrainConfig::tissue_fill, "true or false")},
      {"glass", set(&TrainConfig::glass, "true or false")},
      {"model", set(&TrainConfig::model, "a model name")},
      {"pool", set(&TrainConfig::pool, "avg, max or attention")},
      {"attention_hidden", set(&TrainConfig::attention_hidden, "a whole number")},
      {"attention_gated", set(&TrainConfig::attention_gated, "true or false")},
      {"attention_branches", set(&TrainConfig::attention_branches, "1 or classes")},
      {"attention_dropout", set(&TrainConfig::attention_dropout, "a number")},
      {"class_weights",
       [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
         c.class_weights.clear();
         if (is_null(n) || (n.IsScalar() && n.Scalar() == "none")) {
           c.class_weights_mode = "none";
         } else if (n.IsScalar() && n.Scalar() == "auto") {
           c.class_weights_mode = "auto";
         } else if (n.IsSequence()) {
           c.class_weights_mode = "list";
           for (const YAML::Node& item : n)
             c.class_weights.push_back(scalar<double>(item, where, "a number per class"));
         } else {
           throw Error(where + ": expected auto, none, or a list of one number per class");
         }
       }},
      {"norm", set(&TrainConfig::norm, "frozen, batch or group")},
      {"dropout", set(&TrainConfig::dropout, "a number")},
      {"init_weights", set_path(&TrainConfig::init_weights)},
      {"epochs", set(&TrainConfig::epochs, "a whole number")},
      {"batch", set(&TrainConfig::batch, "a whole number")},
      {"optimizer", set(&TrainConfig::optimizer, "sgd, adam or adamw")},
      {"lr", set(&TrainConfig::lr, "a number")},
      {"momentum", set(&TrainConfig::momentum, "a number")},
      {"weight_decay", set(&TrainConfig::weight_decay, "a number")},
      {"schedule", set(&TrainConfig::schedule, "constant, step or cosine")},
      {"warmup_epochs", set(&TrainConfig::warmup_epochs, "a number")},
      {"step_epochs", set(&TrainConfig::step_epochs, "a whole number")},
      {"gamma", set(&TrainConfig::gamma, "a number")},
      {"balance", set(&TrainConfig::balance, "none, weighted or sampling")},
      {"flips", set(&TrainConfig::flips, "true or false")},
      {"rotations", set(&TrainConfig::rotations, "true or false")},
      {"color_jitter", set(&TrainConfig::color_jitter, "a number")},
      {"metric", set(&TrainConfig::metric, "accuracy, balanced_accuracy, auc or loss")},
      {"patience", set(&TrainConfig::patience, "a whole number")},
      {"budget", set(&TrainConfig::budget, "a size such as 2GiB")},
      {"strategy", set(&TrainConfig::strategy, "grid, rows, rows-shared, auto or none")},
      {"device", set(&TrainConfig::device, "cpu, cuda, cuda:N or auto")},
      {"precision", set(&TrainConfig::precision, "float32, tf32 or bf16")},
      {"read_ahead", set(&TrainConfig::read_ahead, "auto or a number of slides")},
      {"parallel", set(&TrainConfig::parallel, "data, slide or hybrid")},
      {"slide_ranks", set(&TrainConfig::slide_ranks, "a whole number")},
      {"seed", set(&TrainConfig::seed, "a whole number")},
      {"output", set_path(&TrainConfig::output)},
  };
  return table;
}

void apply(TrainConfig& config, const std::string& key, const YAML::Node& value,
           const std::string& origin) {
  const auto it = setters().find(key);
  if (it == setters().end()) {
    std::string known;
    for (const auto& [name, setter] : setters()) known += (known.empty() ? "" : ", ") + name;
    throw Error(origin + ": unknown key '" + key + "' (known keys: " + known + ")");
  }
  it->second(config, value, origin + ": " + key);
}

void require(bool ok, const std::string& origin, const std::string& key, const std::string& why) {
  if (!ok) throw Error(origin + ": " + key + " " + why);
}

template <typename Range>
bool one_of(const std::string& value, const Range& allowed) {
  return std::find(std::begin(allowed), std::end(allowed), value) != std::end(allowed);
}

// More than zero and finite: `lr: .inf` or `mpp: inf` is no setting.
bool positive(double v) { return v > 0 && std::isfinite(v); }

void validate(const TrainConfig& c, const std::string& origin) {
  require(!c.manifest.empty(), origin, "manifest", "is required (the CSV of slides and labels)");
  require(c.val_fraction >= 0 && c.test_fraction >= 0 && c.val_fraction + c.test_fraction < 1,
          origin, "val_fraction/test_fraction", "must be ≥ 0 and sum to less than 1");
  const int resolutions = static_cast<int>(c.mpp.has_value()) +
                          static_cast<int>(c.magnification.has_value()) +
                          static_cast<int>(c.level.has_value());
  require(resolutions <= 1, origin, "mpp/magnification/level", "are exclusive: give one");
  require(!c.mpp || positive(*c.mpp), origin, "mpp", "must be a positive number");
  require(!c.magnification || positive(*c.magnification), origin, "magnification",
          "must be a positive number");
  require(!c.level || *c.level >= 0, origin, "level", "must be 0 or more");
  require(!c.base_mpp || positive(*c.base_mpp), origin, "base_mpp", "must be a positive number");
  const std::vector<std::string> models = models::model_names();
  require(one_of(c.model, models) || c.model.ends_with(".h5"), origin, "model",
          "'" + c.model +
              "' is not a model Tessel knows (tessel train --help lists them) nor a checkpoint "
              "holding a network (NET.h5)");
  require(one_of(c.pool, std::vector<std::string>{"avg", "max", "attention"}), origin, "pool",
          "must be avg, max or attention");
  require(c.attention_hidden >= 1 && c.attention_hidden <= 65536, origin, "attention_hidden",
          "must be between 1 and 65536");
  require(one_of(c.attention_branches, std::vector<std::string>{"1", "classes"}), origin,
          "attention_branches", "must be 1 or classes");
  require(c.attention_dropout >= 0 && c.attention_dropout < 1, origin, "attention_dropout",
          "must be in [0, 1)");
  require(c.pool == "attention" || (c.attention_branches == "1" && c.attention_hidden == 128 &&
                                    c.attention_gated && c.attention_dropout == 0),
          origin, "attention_hidden/attention_gated/attention_branches/attention_dropout",
          "apply to pool: attention only (pool is " + c.pool + ")");
  require(one_of(c.norm, std::vector<std::string>{"frozen", "batch", "group"}), origin, "norm",
          "must be frozen, batch or group");
  require(c.dropout >= 0 && c.dropout < 1, origin, "dropout", "must be in [0, 1)");
  require(c.epochs >= 1, origin, "epochs", "must be at least 1");
  require(c.batch >= 1, origin, "batch", "must be at least 1");
  require(one_of(c.optimizer, std::vector<std::string>{"sgd", "adam", "adamw"}), origin,
          "optimizer", "must be sgd, adam or adamw");
  require(positive(c.lr), origin, "lr", "must be a positive number");
  require(c.momentum >= 0 && c.momentum < 1, origin, "momentum", "must be in [0, 1)");
  require(c.weight_decay == 0 || positive(c.weight_decay), origin, "weight_decay",
          "must be 0 or more");
  require(one_of(c.schedule, std::vector<std::string>{"constant", "step", "cosine"}), origin,
          "schedule", "must be constant, step or cosine");
  require(c.warmup_epochs == 0 || positive(c.warmup_epochs), origin, "warmup_epochs",
          "must be 0 or more");
  require(c.step_epochs >= 1, origin, "step_epochs", "must be at least 1");
  require(positive(c.gamma), origin, "gamma", "must be a positive number");
  require(one_of(c.balance, std::vector<std::string>{"none", "weighted", "sampling"}), origin,
          "balance", "must be none, weighted or sampling");
  require(c.color_jitter >= 0 && c.color_jitter < 1, origin, "color_jitter", "must be in [0, 1)");
  require(c.class_weights_mode == "none" || c.balance == "none", origin, "class_weights",
          "and balance: " + c.balance + " both weight the classes: give one");
  for (double w : c.class_weights) {
    require(w > 0 && std::isfinite(w), origin, "class_weights", "must be positive numbers");
  }
  require(c.class_weights_mode != "list" || c.classes.empty() ||
              c.class_weights.size() == c.classes.size(),
          origin, "class_weights",
          "has " + std::to_string(c.class_weights.size()) + " numbers for " +
              std::to_string(c.classes.size()) + " classes");
  require(
      one_of(c.metric, std::vector<std::string>{"accuracy", "balanced_accuracy", "auc", "loss"}),
      origin, "metric", "must be accuracy, balanced_accuracy, auc or loss");
  require(c.patience >= 0, origin, "patience", "must be 0 or more");
  require(c.read_ahead == "auto" ||
              (c.read_ahead.find_first_not_of("0123456789") == std::string::npos &&
               !c.read_ahead.empty() && c.read_ahead.size() <= 2 && std::stoi(c.read_ahead) <= 16),
          origin, "read_ahead", "must be auto or a number of slides from 0 to 16");
  try {
    require(core::parse_bytes(c.budget) > 0, origin, "budget", "must be positive");
    core::parse_strategy(c.strategy);
    core::parse_precision(c.precision);
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
  require(core::is_device_name(c.device), origin, "device", "must be cpu, cuda, cuda:N or auto");
  require(one_of(c.parallel, std::vector<std::string>{"data", "slide", "hybrid"}), origin,
          "parallel", "must be data, slide or hybrid");
  require(c.parallel == "hybrid" || c.slide_ranks == 0, origin, "slide_ranks",
          "is the group size of parallel: hybrid (parallel: slide uses every rank)");
  require(c.parallel != "hybrid" || c.slide_ranks >= 2, origin, "slide_ranks",
          "must be 2 or more with parallel: hybrid (the ranks that share each slide)");
  // The strategies a step split over ranks cannot run (core/plan/split.h).
  const core::Strategy strategy = core::parse_strategy(c.strategy);
  require(c.parallel == "data" ||
              (strategy != core::Strategy::kNone && strategy != core::Strategy::kRowsShared),
          origin, "strategy",
          "must be auto, grid or rows with parallel: " + c.parallel +
              " (a slide's step split over ranks cannot run " + c.strategy + ")");
  require(c.seed >= 0, origin, "seed", "must be 0 or more");
  require(!c.output.empty(), origin, "output", "is required (the run folder)");
}

// YAML::Load, its errors as tessel::Error after `refusal`.
YAML::Node load_yaml(const std::string& text, const std::string& refusal) {
  try {
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message here is "bad file".
    throw Error(refusal + "lists or mappings nested more than " + std::to_string(e.depth()) +
                " deep (line " + std::to_string(e.mark.line + 1) +
                "); a config's values are names, numbers and short lists");
  } catch (const YAML::Exception& e) {
    throw Error(refusal + e.what());
  }
}

}  // namespace

TrainConfig parse_train_config(const std::string& yaml, const std::string& origin,
                               const std::vector<std::string>& overrides) {
  TrainConfig config;
  YAML::Node root;
  root = load_yaml(yaml, origin + ": not valid YAML or JSON: ");
  if (root.IsDefined() && !root.IsNull()) {
    if (!root.IsMap()) throw Error(origin + ": expected keys and values (a YAML mapping)");
    std::set<std::string> seen;
    for (const auto& item : root) {
      // A list or mapping as a key (`{[a, b]: 1}`, `? [a]`): as<std::string> would throw
      // yaml-cpp's own exception, past every caller that expects tessel::Error.
      if (!item.first.IsScalar() && !item.first.IsNull()) {
        throw Error(origin + ": the key on line " + std::to_string(item.first.Mark().line + 1) +
                    " is a list or a mapping; keys are names such as lr");
      }
      const std::string key = item.first.as<std::string>();
      // YAML forbids a key twice; yaml-cpp would let the last win silently.
      if (!seen.insert(key).second) {
        throw Error(origin + ": key '" + key + "' appears twice (line " +
                    std::to_string(item.first.Mark().line + 1) + "); keep one");
      }
      apply(config, key, item.second, origin);
    }
  }
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error("override '" + o + "' is not key=value");
    }
    const YAML::Node value = load_yaml(o.substr(eq + 1), "override '" + o + "': ");
    apply(config, o.substr(0, eq), value, "override");
  }
  validate(config, origin);
  return config;
}

TrainConfig load_train_config(const std::filesystem::path& path,
                              const std::vector<std::string>& overrides) {
  std::string text;
  if (!path.empty()) {
    if (std::filesystem::is_directory(path)) {
      throw Error("cannot read config " + path.string() +
                  ": it is a folder; give the YAML or JSON file (a run folder's is config.yaml)");
    }
    text =
        io::read_user_file(path, "cannot read config " + path.string() + ": ", io::kMaxConfigBytes);
    if (const std::string bad = io::utf8_problem(text); !bad.empty()) {
      throw Error("cannot read config " + path.string() + ": " + bad + "; save it as UTF-8");
    }
  }
  for (const std::string& o : overrides) {
    if (const std::string bad = io::utf8_problem(o); !bad.empty()) {
      throw Error("the setting '" + o + "' is not UTF-8 text: " + bad);
    }
  }
  return parse_train_config(text, path.empty() ? "config" : path.string(), overrides);
}

std::string TrainConfig::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  const auto optional = [&out](const char* key, const auto& value) {
    out << YAML::Key << key << YAML::Value;
    if (value) {
      out << *value;
    } else {
      out << YAML::Null;
    }
  };
  out << YAML::Key << "manifest" << YAML::Value << manifest.string();
  out << YAML::Key << "classes" << YAML::Value << YAML::Flow << classes;
  out << YAML::Key << "val_fraction" << YAML::Value << val_fraction;
  out << YAML::Key << "test_fraction" << YAML::Value << test_fraction;
  optional("mpp", mpp);
  optional("magnification", magnification);
  optional("level", level);
  optional("base_mpp", base_mpp);
  out << YAML::Key << "tissue_bbox" << YAML::Value << tissue_bbox;
  out << YAML::Key << "tissue_fill" << YAML::Value << tissue_fill;
  out << YAML::Key << "glass" << YAML::Value << glass;
  out << YAML::Key << "model" << YAML::Value << model;
  out << YAML::Key << "pool" << YAML::Value << pool;
  out << YAML::Key << "attention_hidden" << YAML::Value << attention_hidden;
  out << YAML::Key << "attention_gated" << YAML::Value << attention_gated;
  out << YAML::Key << "attention_branches" << YAML::Value << attention_branches;
  out << YAML::Key << "attention_dropout" << YAML::Value << attention_dropout;
  out << YAML::Key << "norm" << YAML::Value << norm;
  out << YAML::Key << "dropout" << YAML::Value << dropout;
  out << YAML::Key << "init_weights" << YAML::Value << init_weights.string();
  out << YAML::Key << "epochs" << YAML::Value << epochs;
  out << YAML::Key << "batch" << YAML::Value << batch;
  out << YAML::Key << "optimizer" << YAML::Value << optimizer;
  out << YAML::Key << "lr" << YAML::Value << lr;
  out << YAML::Key << "momentum" << YAML::Value << momentum;
  out << YAML::Key << "weight_decay" << YAML::Value << weight_decay;
  out << YAML::Key << "schedule" << YAML::Value << schedule;
  out << YAML::Key << "warmup_epochs" << YAML::Value << warmup_epochs;
  out << YAML::Key << "step_epochs" << YAML::Value << step_epochs;
  out << YAML::Key << "gamma" << YAML::Value << gamma;
  out << YAML::Key << "balance" << YAML::Value << balance;
  out << YAML::Key << "class_weights" << YAML::Value;
  if (class_weights_mode == "list") {
    out << YAML::Flow << class_weights;
  } else {
    out << class_weights_mode;
  }
  out << YAML::Key << "flips" << YAML::Value << flips;
  out << YAML::Key << "rotations" << YAML::Value << rotations;
  out << YAML::Key << "color_jitter" << YAML::Value << color_jitter;
  out << YAML::Key << "metric" << YAML::Value << metric;
  out << YAML::Key << "patience" << YAML::Value << patience;
  out << YAML::Key << "budget" << YAML::Value << budget;
  out << YAML::Key << "strategy" << YAML::Value << strategy;
  out << YAML::Key << "device" << YAML::Value << device;
  out << YAML::Key << "precision" << YAML::Value << precision;
  out << YAML::Key << "read_ahead" << YAML::Value << read_ahead;
  out << YAML::Key << "parallel" << YAML::Value << parallel;
  out << YAML::Key << "slide_ranks" << YAML::Value << slide_ranks;
  out << YAML::Key << "seed" << YAML::Value << seed;
  out << YAML::Key << "output" << YAML::Value << output.string();
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace tessel::pipelines
