// A small JSON parser for tests that read what the runtime writes (trace
// files): null, booleans, numbers (as double), strings (the escapes JSON
// defines; \u escapes below 0x80 only), arrays and objects. ParseJson
// returns false with a message naming the offset on malformed input, so a
// test fails on a file that is not valid JSON instead of guessing.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sf::testing {

struct JsonValue {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<JsonValue> arr;
  std::map<std::string, JsonValue> obj;

  // The member `key` of an object, or null when there is none (or this is
  // not an object).
  const JsonValue* Find(const std::string& key) const {
    if (kind != kObject) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &it->second;
  }
  // The string member `key`, or "" when missing or not a string.
  std::string Str(const std::string& key) const {
    const JsonValue* v = Find(key);
    return v && v->kind == kString ? v->str : "";
  }
  // The number member `key`, or `def` when missing or not a number.
  double Num(const std::string& key, double def = -1) const {
    const JsonValue* v = Find(key);
    return v && v->kind == kNumber ? v->num : def;
  }
};

namespace json_detail {

struct Parser {
  const std::string& s;
  size_t i = 0;
  std::string error;

  bool Fail(const std::string& what) {
    if (error.empty()) error = what + " at offset " + std::to_string(i);
    return false;
  }
  void Space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  bool Literal(const char* lit) {
    const std::string l(lit);
    if (s.compare(i, l.size(), l) != 0) return Fail("expected " + l);
    i += l.size();
    return true;
  }
  bool String(std::string* out) {
    if (i >= s.size() || s[i] != '"') return Fail("expected a string");
    ++i;
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (static_cast<unsigned char>(c) < 0x20) return Fail("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (i >= s.size()) return Fail("unterminated escape");
      c = s[i++];
      switch (c) {
        case '"': case '\\': case '/': out->push_back(c); break;
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'u': {
          if (i + 4 > s.size()) return Fail("short \\u escape");
          const long v = std::strtol(s.substr(i, 4).c_str(), nullptr, 16);
          if (v >= 0x80) return Fail("\\u escape past ASCII (not supported here)");
          out->push_back(static_cast<char>(v));
          i += 4;
          break;
        }
        default: return Fail("bad escape");
      }
    }
    if (i >= s.size()) return Fail("unterminated string");
    ++i;
    return true;
  }
  bool Number(double* out) {
    const size_t start = i;
    if (i < s.size() && s[i] == '-') ++i;
    if (i >= s.size() || !(s[i] >= '0' && s[i] <= '9')) return Fail("expected a digit");
    while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
                            s[i] == '+' || s[i] == '-'))
      ++i;
    char* end = nullptr;
    const std::string text = s.substr(start, i - start);
    *out = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size()) return Fail("malformed number");
    return true;
  }
  bool Value(JsonValue* v, int depth) {
    if (depth > 64) return Fail("nested too deep");
    Space();
    if (i >= s.size()) return Fail("unexpected end");
    const char c = s[i];
    if (c == '{') {
      v->kind = JsonValue::kObject;
      ++i;
      Space();
      if (i < s.size() && s[i] == '}') return ++i, true;
      for (;;) {
        Space();
        std::string key;
        if (!String(&key)) return false;
        Space();
        if (i >= s.size() || s[i] != ':') return Fail("expected ':'");
        ++i;
        if (!Value(&v->obj[key], depth + 1)) return false;
        Space();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == '}') return ++i, true;
        return Fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v->kind = JsonValue::kArray;
      ++i;
      Space();
      if (i < s.size() && s[i] == ']') return ++i, true;
      for (;;) {
        v->arr.emplace_back();
        if (!Value(&v->arr.back(), depth + 1)) return false;
        Space();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == ']') return ++i, true;
        return Fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v->kind = JsonValue::kString;
      return String(&v->str);
    }
    if (c == 't') { v->kind = JsonValue::kBool; v->b = true; return Literal("true"); }
    if (c == 'f') { v->kind = JsonValue::kBool; return Literal("false"); }
    if (c == 'n') { v->kind = JsonValue::kNull; return Literal("null"); }
    v->kind = JsonValue::kNumber;
    return Number(&v->num);
  }
};

}  // namespace json_detail

// Parses text (one value, then only white space); false with *error set on
// malformed JSON.
inline bool ParseJson(const std::string& text, JsonValue* out, std::string* error) {
  json_detail::Parser p{text};
  if (!p.Value(out, 0)) {
    *error = p.error;
    return false;
  }
  p.Space();
  if (p.i != text.size()) {
    *error = "trailing text at offset " + std::to_string(p.i);
    return false;
  }
  return true;
}

}  // namespace sf::testing
