#include "cache/decision_event.h"

namespace skippy::cache {

decision_event::decision_event(std::string_view name, int32_t stage, telemetry::event_level level)
    : name_(name), stage_(stage), level_(level) {}

telemetry::event decision_event::to_event() const {
    telemetry::event ev;
    ev.name = name_;
    ev.stage = stage_;
    ev.level = level_;
    for (size_t i = 0; i < n_attrs; ++i) {
        if (values_[i]) ev.attrs.emplace_back(std::string(attr_descriptors[i].name), *values_[i]);
    }
    return ev;
}

}  // namespace skippy::cache
