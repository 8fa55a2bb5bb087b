// sprig/version.hpp — the library's version. CMake reads SPRIG_VERSION_MAJOR/MINOR/PATCH from
// this file for project() and the package version, so this is the one place it is written.
#pragma once

#define SPRIG_VERSION_MAJOR 0
#define SPRIG_VERSION_MINOR 1
#define SPRIG_VERSION_PATCH 0
// SPRIG_VERSION: major * 10000 + minor * 100 + patch, for #if comparisons.
#define SPRIG_VERSION (SPRIG_VERSION_MAJOR * 10000 + SPRIG_VERSION_MINOR * 100 + SPRIG_VERSION_PATCH)
