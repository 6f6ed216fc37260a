// Checked reading of JSON and integers from untrusted input (see checked_input.h).
#include "base/checked_input.h"

#include <climits>
#include <cmath>
#include <limits>
#include <utility>

#include "base/input_error.h"

namespace tt {
namespace {

using nlohmann::json;

// At most this many characters of an offending value are quoted in a message, so a
// megabyte-long string in a hostile file still gives a short one-line error.
constexpr size_t kMaxQuoted = 64;
constexpr size_t kMaxReason = 200;  // nlohmann's reasons quote the input too

// printable() with the length limit as a parameter.
std::string printable_prefix(std::string text, size_t max_size) {
  if (text.size() > max_size) text = text.substr(0, max_size) + "...";
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return text;
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix, printable.
std::string printable_reason(const std::string& message) {
  std::string out = message.substr(message.rfind(']', message.find(' ')) + 1);
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);
  return printable_prefix(out, kMaxReason);
}

// A JSON value as it would be written back (strings in quotes), for messages.
std::string quote(const json& value) {
  return printable(value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace));
}

std::string range_str(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace

std::string printable(const std::string& text) { return printable_prefix(text, kMaxQuoted); }

json parse_json(const char* first, const char* last, const std::string& where) {
  try {
    return json::parse(first, last);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1E400
    throw InputError(where + " is not valid JSON: " + printable_reason(e.what()));
  }
}

json parse_json(const std::string& text, const std::string& where) {
  return parse_json(text.data(), text.data() + text.size(), where);
}

std::optional<int64_t> json_integer_value(const json& value) {
  if (value.is_number_unsigned()) {  // nlohmann's type for integers >= 0 written without a sign
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;  // floats (64.9, 1e300, 64.0), integers beyond 64 bits (stored as floats), non-numbers
}

int64_t parse_integer(const std::string& text, int64_t lo, int64_t hi, const std::string& where) {
  const size_t first_digit = !text.empty() && text[0] == '-' ? 1 : 0;
  bool ok = text.size() > first_digit && text.size() - first_digit <= 19 &&
            text.find_first_not_of("0123456789", first_digit) == std::string::npos;
  int64_t value = 0;
  if (ok) {
    // 19 digits can exceed int64_t (9.2e18): accumulate in unsigned 64 bits, which holds them.
    uint64_t magnitude = 0;
    for (size_t i = first_digit; i < text.size(); ++i) magnitude = magnitude * 10 + static_cast<uint64_t>(text[i] - '0');
    const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    ok = magnitude <= limit;  // -2^63 itself is refused too; no field goes that low
    if (ok) value = first_digit ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
  }
  if (!ok || value < lo || value > hi)
    throw InputError(where + " must be an integer in " + range_str(lo, hi) + ", got '" + printable(text) + "'");
  return value;
}

JsonFields::JsonFields(json object, std::string where) : object_(std::move(object)), where_(std::move(where)) {
  if (!object_.is_object()) throw InputError(where_ + ": not a JSON object");
}

const json& JsonFields::get(const std::string& key) {
  auto it = object_.find(key);
  if (it == object_.end()) throw InputError(where_ + ": missing field '" + key + "'");
  read_.insert(key);
  return *it;
}

void JsonFields::fail(const std::string& key, const std::string& problem, const json& value) const {
  throw InputError(where_ + ": field '" + key + "' " + problem + ", got " + quote(value));
}

int64_t JsonFields::integer(const std::string& key, int64_t lo, int64_t hi) {
  const json& value = get(key);
  const std::optional<int64_t> v = json_integer_value(value);
  if (!v || *v < lo || *v > hi) fail(key, "must be an integer in " + range_str(lo, hi), value);
  return *v;
}

int JsonFields::positive_int(const std::string& key) { return static_cast<int>(integer(key, 1, INT_MAX)); }

double JsonFields::number(const std::string& key) {
  const json& value = get(key);
  // Parsing refuses numbers beyond double's range, so every JSON number here is finite.
  if (!value.is_number()) fail(key, "must be a number", value);
  return value.get<double>();
}

float JsonFields::number_f32(const std::string& key) {
  const double v = number(key);
  // Converting a double beyond float's range to float is undefined behaviour: check first.
  if (std::fabs(v) > std::numeric_limits<float>::max()) fail(key, "is beyond the range of a 32-bit float", object_.at(key));
  return static_cast<float>(v);
}

bool JsonFields::boolean(const std::string& key) {
  const json& value = get(key);
  if (!value.is_boolean()) fail(key, "must be true or false", value);
  return value.get<bool>();
}

std::string JsonFields::string(const std::string& key) {
  const json& value = get(key);
  if (!value.is_string()) fail(key, "must be a string", value);
  return value.get<std::string>();
}

void JsonFields::finish() const {
  for (const auto& item : object_.items())
    if (read_.count(item.key()) == 0) throw InputError(where_ + ": unknown field '" + printable(item.key()) + "'");
}

}  // namespace tt
