// sprig/io/batches.hpp — forwarding header, kept for one release: the seeded shuffled
// mini-batches moved to sprig/data/batches.hpp (data sets apart from serialisation); the names
// stay in namespace sprig. Include <sprig/data/batches.hpp> instead.
#pragma once

#include "../data/batches.hpp"
