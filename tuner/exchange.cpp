#include "tuner/exchange.h"

#include <nlohmann/json.hpp>
#include <ostream>

#include "core/error.h"

namespace attune::tuner {

namespace {

using nlohmann::json;

constexpr const char* kFormat = "attune.measurements";
constexpr int kFormatVersion = 1;

json optional_number(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }

// The problem key of an exported measurement; InvalidArgument names a value
// this version does not know.
ProblemKey key_of(const json& e) {
  const auto text = [&](const char* field) { return e.at(field).get<std::string>(); };
  const auto bad = [](const char* field, const std::string& value, const char* expected) {
    return InvalidArgument("import: " + std::string(field) + " '" + value + "'; expected " + expected);
  };
  ProblemKey key;
  const std::string op = text("op");
  const std::string dtype = text("dtype");
  const std::string mask = text("mask");
  if (const auto unknown = parse_key_names(op, dtype, mask, key)) {
    throw bad(unknown->field, unknown->value, unknown->expected);
  }
  // Absent from exports before score modifiers: none.
  const std::string modifiers = e.contains("modifiers") ? text("modifiers") : "none";
  if (const auto bits = parse_modifier_names(modifiers)) {
    key.modifiers = *bits;
  } else {
    throw bad("modifiers", modifiers, "none, or softcap, sinks and alibi joined by '+'");
  }
  key.head_dim_k = e.at("head_dim_k").get<int>();
  key.head_dim_v = e.at("head_dim_v").get<int>();
  // Bucket exponents out of range are refused by the database, not wrapped here.
  const auto exponent = [&](const char* field) {
    const int v = e.at(field).get<int>();
    if (v < 0 || v > 62)
      throw InvalidArgument("import: " + std::string(field) + " " + std::to_string(v) + "; expected 0..62");
    return static_cast<std::int8_t>(v);
  };
  key.seqlen_q_log2 = exponent("seqlen_q_log2");
  key.seqlen_k_log2 = exponent("seqlen_k_log2");
  key.batch_heads_log2 = exponent("batch_heads_log2");
  return key;
}

json to_json(const tuning_db::MeasurementRow& m) {
  const ProblemKey& k = m.problem.key;
  return {{"device", m.device_key},
          {"op", to_string(k.op)},
          {"dtype", storage_name(k.dtype, k.kv_dtype)},
          {"head_dim_k", k.head_dim_k},
          {"head_dim_v", k.head_dim_v},
          {"mask", to_string(k.mask)},
          {"modifiers", modifier_names(k.modifiers)},
          {"seqlen_q_log2", k.seqlen_q_log2},
          {"seqlen_k_log2", k.seqlen_k_log2},
          {"batch_heads_log2", k.batch_heads_log2},
          {"seqlen_q", m.problem.seqlen_q},
          {"seqlen_k", m.problem.seqlen_k},
          {"batch", m.problem.batch},
          {"heads_q", m.problem.heads_q},
          {"heads_kv", m.problem.heads_kv},
          {"kernel", m.kernel},
          {"template_hash", m.template_hash},
          {"variant", m.variant_id},
          {"ok", m.ok},
          {"median_ms", optional_number(m.median_ms)},
          {"spread_ms", optional_number(m.spread_ms)},
          {"repetitions", m.repetitions},
          {"tflops", optional_number(m.tflops)},
          {"max_error", optional_number(m.max_error)},
          {"measured_at", m.measured_at},
          {"driver_version", m.driver_version},
          {"nvrtc_version", m.nvrtc_version},
          {"attune_version", m.attune_version ? json(*m.attune_version) : json(nullptr)},
          {"error", m.error}};
}

std::string csv_field(const json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string quoted = "\"";
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }
  if (value.is_boolean()) return value.get<bool>() ? "1" : "0";
  return value.dump();
}

std::optional<double> optional_double(const json& entry, const char* field) {
  const json& value = entry.at(field);
  return value.is_null() ? std::nullopt : std::optional<double>(value.get<double>());
}

}  // namespace

void export_json(const tuning_db::TuningDb& db, std::ostream& out) {
  json rows = json::array();
  for (const tuning_db::MeasurementRow& m : db.all_measurements()) rows.push_back(to_json(m));
  out << json{{"format", kFormat}, {"version", kFormatVersion}, {"measurements", rows}}.dump(1) << '\n';
}

void export_csv(const tuning_db::TuningDb& db, std::ostream& out) {
  const std::vector<tuning_db::MeasurementRow> rows = db.all_measurements();
  const json header = to_json(tuning_db::MeasurementRow{});
  bool first = true;
  for (const auto& [name, value] : header.items()) {
    out << (first ? "" : ",") << name;
    first = false;
  }
  out << '\n';
  for (const tuning_db::MeasurementRow& m : rows) {
    first = true;
    const json row = to_json(m);  // items() must not outlive the object it walks
    for (const auto& [name, value] : row.items()) {
      out << (first ? "" : ",") << csv_field(value);
      first = false;
    }
    out << '\n';
  }
}

std::size_t import_json(tuning_db::TuningDb& db, std::istream& in) {
  json document;
  try {
    in >> document;
  } catch (const json::exception& e) {
    throw InvalidArgument(std::string("import: not JSON: ") + e.what());
  }
  // Compared as JSON values: a field of another type is refused, not thrown
  // from inside the JSON library.
  if (!document.is_object() || !document.contains("format") || document.at("format") != kFormat) {
    throw InvalidArgument(std::string("import: expected a document with \"format\": \"") + kFormat +
                          "\" (what attune db export --format json writes)");
  }
  if (!document.contains("version") || document.at("version") != kFormatVersion) {
    throw InvalidArgument("import: format version " + document.value("version", json(nullptr)).dump() + "; expected " +
                          std::to_string(kFormatVersion));
  }
  if (!document.contains("measurements") || !document.at("measurements").is_array()) {
    throw InvalidArgument("import: expected \"measurements\": an array of measurements");
  }
  std::size_t added = 0;
  std::size_t index = 0;
  for (const json& e : document.at("measurements")) {
    try {
      const std::string device_key = e.at("device").get<std::string>();
      const tuning_db::DeviceRowId device =
          db.upsert_device({.key = device_key, .name = device_key.substr(0, device_key.find('/'))});
      const tuning_db::TemplateRowId tmpl =
          db.upsert_template(e.at("kernel").get<std::string>(), e.at("template_hash").get<std::string>());
      const tuning_db::VariantRowId variant = db.upsert_variant(tmpl, e.at("variant").get<std::string>());
      const tuning_db::ProblemRowId problem = db.upsert_problem({.key = key_of(e),
                                                                 .seqlen_q = e.at("seqlen_q").get<std::int64_t>(),
                                                                 .seqlen_k = e.at("seqlen_k").get<std::int64_t>(),
                                                                 .batch = e.at("batch").get<std::int64_t>(),
                                                                 .heads_q = e.at("heads_q").get<std::int64_t>(),
                                                                 .heads_kv = e.at("heads_kv").get<std::int64_t>()});
      const bool inserted = db.record_measurement(
          {.device = device,
           .problem = problem,
           .variant = variant,
           .ok = e.at("ok").get<bool>(),
           .median_ms = optional_double(e, "median_ms"),
           .spread_ms = optional_double(e, "spread_ms"),
           .repetitions = e.at("repetitions").get<int>(),
           .tflops = optional_double(e, "tflops"),
           .max_error = optional_double(e, "max_error"),
           .driver_version = e.at("driver_version").get<std::string>(),
           .nvrtc_version = e.at("nvrtc_version").get<std::string>(),
           .attune_version = e.at("attune_version").is_null() ? "" : e.at("attune_version").get<std::string>(),
           .measured_at = e.at("measured_at").get<std::string>(),
           // Absent from exports before schema 3.
           .error = e.contains("error") && e.at("error").is_string() ? e.at("error").get<std::string>() : ""});
      added += inserted ? 1 : 0;
    } catch (const json::exception& x) {
      throw InvalidArgument("import: measurement " + std::to_string(index) + ": " + x.what());
    }
    ++index;
  }
  return added;
}

}  // namespace attune::tuner
