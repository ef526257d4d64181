@0xd3a8f1c2b4e5a601;
# PLACEHOLDER
struct Placeholder { x @0 :Int32; }
