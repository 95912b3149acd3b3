#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(scenario) = noexecute::offline::scenario::Scenario::parse(std::path::Path::new("fuzz.yaml"), text)
    {
        let _ = noexecute::offline::simulate::run(scenario, noexecute::offline::simulate::Options::default());
    }
});
