#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(scenario) = noexecute::scenario::Scenario::parse(std::path::Path::new("fuzz.yaml"), text)
    {
        let _ = noexecute::simulate::run(scenario, noexecute::simulate::Options::default());
    }
});
