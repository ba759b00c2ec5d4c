//! Links esp-hal's scripts (`linkall.x`: the ESP32-C3's IROM/DROM/IRAM/DRAM
//! map, the app descriptor, riscv-rt's sections). The image, prompt and the
//! rest of the configuration are read by `ferrite-boards`'s build script (../build.rs).

fn main() {
    println!("cargo:rustc-link-arg=-Tlinkall.x");
}
