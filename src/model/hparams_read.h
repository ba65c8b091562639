// Internal to src/model: reading a family's metadata keys under "<arch>." with range
// checks, for hparams.cpp and the families' read_hparams.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"

#include <string>

namespace skippy {

class metadata_reader {
public:
    metadata_reader(const gguf::file & file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}
    const gguf::file & file() const { return file_; }
    const std::string & prefix() const { return prefix_; }
    bool has(const std::string & key) const { return file_.find(prefix_ + key) != nullptr; }
    // <prefix>key as an integer in [lo, hi] into out; absent: out unchanged, or an
    // invalid_data error naming the key when required.
    status count(const std::string & key, int64_t lo, int64_t hi, int32_t & out, bool required) const;
    // <prefix>key as a finite float into out; absent: out unchanged.
    status real(const std::string & key, float & out) const;
    status missing(const std::string & key) const;

private:
    const gguf::file & file_;
    std::string        prefix_;
};

}  // namespace skippy
