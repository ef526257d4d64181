// JsonLine: builds one JSON object on one line, the format every example and
// benchmark prints with --json (the last line is the summary).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace sf::examples {

class JsonLine {
 public:
  JsonLine& Add(const std::string& key, const std::string& v) { return Raw(key, Quote(v)); }
  JsonLine& Add(const std::string& key, const char* v) { return Raw(key, Quote(v)); }
  JsonLine& Add(const std::string& key, double v) {
    if (!std::isfinite(v)) return Raw(key, "null");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return Raw(key, buf);
  }
  JsonLine& Add(const std::string& key, int64_t v) { return Raw(key, std::to_string(v)); }
  JsonLine& Add(const std::string& key, int v) { return Raw(key, std::to_string(v)); }
  JsonLine& Add(const std::string& key, bool v) { return Raw(key, v ? "true" : "false"); }
  JsonLine& Add(const std::string& key, const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", v[i]);
      s += (i ? "," : "") + std::string(buf);
    }
    return Raw(key, s + "]");
  }
  std::string str() const { return "{" + body_ + "}"; }
  // Prints the line to stdout and flushes.
  void Print() const {
    std::printf("%s\n", str().c_str());
    std::fflush(stdout);
  }

 private:
  JsonLine& Raw(const std::string& key, const std::string& v) {
    body_ += (body_.empty() ? "" : ", ") + Quote(key) + ": " + v;
    return *this;
  }
  static std::string Quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') { out += "\\n"; continue; }
      out += c;
    }
    return out + "\"";
  }
  std::string body_;
};

}  // namespace sf::examples
