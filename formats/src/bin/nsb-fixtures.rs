//! `nsb-fixtures examples DIR`: the browser playground's examples index (`examples.json`):
//! every fixture of `DIR`, read and checked by the fixture reader, defaults filled in. The
//! settings, baselines and request keep the key order of the file (the page shows a request
//! as kube-apiserver writes it), so they are copied as written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use namespace_baseline_formats::fixture::{self, Expect, Fixture};
use serde::Serialize;
use serde_json::value::RawValue;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Example<'a> {
    name: &'a str,
    description: &'a str,
    settings: &'a RawValue,
    baselines: &'a RawValue,
    namespaces: &'a RawValue,
    network_policies: &'a RawValue,
    host_error: Option<&'a str>,
    request: &'a RawValue,
    expect: &'a Expect,
}

/// A field as written in the fixture, or its default.
fn field<'a>(
    written: &BTreeMap<&str, &'a RawValue>,
    key: &str,
    default: &'a RawValue,
) -> &'a RawValue {
    written.get(key).copied().unwrap_or(default)
}

fn examples(dir: &Path) -> Result<String, String> {
    let fixtures: Vec<Fixture> = fixture::load_all(dir)?;
    let texts = fixtures
        .iter()
        .map(|f| {
            let path = dir.join(format!("{}.json", f.name));
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let empty_object = RawValue::from_string("{}".to_owned()).expect("JSON");
    let empty_list = RawValue::from_string("[]".to_owned()).expect("JSON");
    let mut examples = Vec::new();
    for (fixture, text) in fixtures.iter().zip(&texts) {
        // Already checked by the reader: the same fields, as written.
        let written: BTreeMap<&str, &RawValue> =
            serde_json::from_str(text).map_err(|e| format!("{}: {e}", fixture.name))?;
        examples.push(Example {
            name: &fixture.name,
            description: &fixture.description,
            settings: field(&written, "settings", &empty_object),
            baselines: field(&written, "baselines", &empty_list),
            namespaces: field(&written, "namespaces", &empty_list),
            network_policies: field(&written, "networkPolicies", &empty_list),
            host_error: fixture.host_error.as_deref(),
            request: field(&written, "request", &empty_object),
            expect: &fixture.expect,
        });
    }
    serde_json::to_string(&examples).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [command, dir] = args.as_slice() else {
        eprintln!("usage: nsb-fixtures examples DIR");
        return ExitCode::from(2);
    };
    if command != "examples" {
        eprintln!("nsb-fixtures: unknown command {command:?} (usage: nsb-fixtures examples DIR)");
        return ExitCode::from(2);
    }
    match examples(&PathBuf::from(dir)) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("nsb-fixtures: {error}");
            ExitCode::FAILURE
        }
    }
}
