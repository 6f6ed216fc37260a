// Reading numbers and JSON from untrusted input: files from users and other programs, and
// command-line flags. One set of helpers for the safetensors reader, the model and optimizer
// configs, the reference's metadata (and, next, checkpoints), so that every number is
// checked the same way before anything uses it:
//   type   an integer field takes JSON integers only: 64.9, 1e300, 64.0, "64" and true are
//          refused, never truncated, wrapped or cast (a cast of 1e300 to int is undefined);
//   range  the value must lie in [lo, hi], which the caller gives (positive where it must be,
//          always within the C++ type that stores it);
//   where  every error is one InputError "<where>: <problem>, got <value>", where `where`
//          names the file and the field ("ref.safetensors: metadata 'config': field 'd_model'").
// Consistency between values (n_head divides d_model, a tensor's shape matches the config)
// is the caller's, once each value is known to be in range.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace tt {

// Parses JSON text. Every failure, including a number too large for a double (`1E400`,
// which nlohmann reports as out_of_range rather than a parse error) becomes
// InputError "<where>: not valid JSON: <reason>", with the reason in printable ASCII.
nlohmann::json parse_json(const char* first, const char* last, const std::string& where);
nlohmann::json parse_json(const std::string& text, const std::string& where);

// Text from the input, made safe to quote in a one-line message: printable ASCII only
// (anything else becomes '?', so a newline in a file cannot split the line), at most 64
// characters (then "...").
std::string printable(const std::string& text);

// The value of a JSON integer that fits int64_t; nullopt for anything else (a float such as
// 64.9 or 1e300, an integer beyond int64_t, a string, a bool...).
std::optional<int64_t> json_integer_value(const nlohmann::json& value);

// A decimal integer written as text (safetensors metadata holds only strings): an optional
// '-' and digits, nothing else ("16" is 16; "1e2", "16.0", " 16", "+16", "0x10" and "" are
// refused), in [lo, hi]. Throws InputError "<where> must be an integer in [lo, hi], got '<text>'".
int64_t parse_integer(const std::string& text, int64_t lo, int64_t hi, const std::string& where);

// The fields of one JSON object, read one at a time, each checked for presence, type and
// range. Errors read "<where>: field '<key>' <problem>" (or "<where>: missing field '<key>'").
// finish() refuses fields that no call read: a misspelt field is an error, not a default.
class JsonFields {
 public:
  // Throws InputError "<where>: not a JSON object" for anything else.
  JsonFields(nlohmann::json object, std::string where);

  int64_t integer(const std::string& key, int64_t lo, int64_t hi);
  int positive_int(const std::string& key);  // integer in [1, INT_MAX]
  double number(const std::string& key);     // any finite JSON number
  float number_f32(const std::string& key);  // finite and within float's range (no overflow to inf)
  bool boolean(const std::string& key);
  std::string string(const std::string& key);
  void finish() const;  // throws InputError "<where>: unknown field '<key>'"

 private:
  const nlohmann::json& get(const std::string& key);  // marks it read; throws when missing
  [[noreturn]] void fail(const std::string& key, const std::string& problem, const nlohmann::json& value) const;

  nlohmann::json object_;
  std::string where_;
  std::set<std::string> read_;
};

}  // namespace tt
