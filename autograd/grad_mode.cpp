#include "autograd/grad_mode.h"

namespace trident::autograd {
namespace {
thread_local bool g_grad_enabled = true;
thread_local AutocastMode g_autocast;
}
bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool enabled) { g_grad_enabled = enabled; }
AutocastMode AutocastMode::get() { return g_autocast; }
void AutocastMode::set(AutocastMode mode) { g_autocast = mode; }
}  // namespace trident::autograd
