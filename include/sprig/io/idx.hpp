// sprig/io/idx.hpp — forwarding header, kept for one release: the IDX reader and the labelled
// image set loader moved to sprig/data/idx.hpp (data sets apart from serialisation); the names
// stay in namespace sprig. Include <sprig/data/idx.hpp> instead.
#pragma once

#include "../data/idx.hpp"
