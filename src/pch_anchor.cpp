// Anchor translation unit for the shared libtorch precompiled header.
