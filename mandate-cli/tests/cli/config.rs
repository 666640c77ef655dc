//! Configuration: `login`, `profiles`, and which key and URL a command uses.

use std::path::Path;

use crate::support::{closed_port_url, command_in, start};

#[test]
fn login_stores_a_private_profile_and_profiles_mask_keys() {
    let env = start();
    let login = env.run(
        &[
            "login",
            "--profile",
            "sandbox",
            "--api-key",
            &env.org_key,
            "--base-url",
            &env.api,
        ],
        &[],
    );
    login.ok().stdout_has("profile sandbox");
    assert!(!login.stdout.contains(&env.org_key));

    let file = env.path("config/mandate/config.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let profiles = env.offline(&["profiles"]);
    profiles
        .ok()
        .stdout_has("sandbox")
        .stdout_has("sk_sandbox_");
    assert!(!profiles.stdout.contains(&env.org_key));
    let masked = &env.org_key[..15];
    profiles.stdout_has(masked).stdout_has("…");
    let as_json = env.offline(&["profiles", "--json"]);
    as_json.ok();
    assert!(!as_json.stdout.contains(&env.org_key));

    // The profile supplies both the base URL and the key.
    env.offline(&["--profile", "sandbox", "agents", "list"])
        .ok();
    env.run(&["agents", "list"], &[("MANDATE_PROFILE", "sandbox")])
        .ok();

    // A key piped on stdin, and the `default` profile used when none is selected.
    env.run_stdin(
        &["login", "--base-url", &env.api],
        &[],
        &format!("{}\n", env.org_key),
    )
    .ok()
    .stdout_has("profile default");
    env.offline(&["agents", "list"]).ok();

    // An unknown profile is a usage error.
    env.offline(&["--profile", "nope", "agents", "list"])
        .code(2)
        .stderr_has("no profile named");
}

#[test]
fn a_flag_beats_the_environment_which_beats_the_profile() {
    let env = start();
    let bogus = "sk_sandbox_00000000000000000000000000000000";
    env.run(
        &[
            "login",
            "--profile",
            "stale",
            "--api-key",
            bogus,
            "--base-url",
            &env.api,
        ],
        &[],
    )
    .ok();

    // The profile's key alone: 401 from the server, exit 1 with the request id.
    env.offline(&["--profile", "stale", "agents", "list"])
        .code(1)
        .stderr_has("unauthorized")
        .stderr_has("request id: req_");
    // The environment overrides the profile (and says so).
    env.run(
        &["--profile", "stale", "agents", "list"],
        &[("MANDATE_API_KEY", &env.org_key)],
    )
    .ok()
    .stderr_has("MANDATE_API_KEY overrides");
    // The flag overrides the environment.
    env.run(
        &["--api-key", &env.org_key, "agents", "list"],
        &[("MANDATE_BASE_URL", &env.api), ("MANDATE_API_KEY", bogus)],
    )
    .ok();
    // And a base URL flag overrides the profile's.
    env.run(
        &[
            "--profile",
            "stale",
            "--base-url",
            &closed_port_url(),
            "--retries",
            "0",
            "agents",
            "list",
        ],
        &[],
    )
    .code(3);
}

/// The config file's path as `profiles --json` reports it, run with HOME and the XDG
/// directories set or removed as given (`None` removes the variable).
fn config_file_with(home: Option<&Path>, xdg_config: Option<&Path>) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let mut command = command_in(scratch.path(), &["profiles", "--json"], &[]);
    for (name, value) in [("HOME", home), ("XDG_CONFIG_HOME", xdg_config)] {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    body["file"].as_str().unwrap().to_owned()
}

#[test]
fn the_config_file_stays_where_it_was_and_needs_no_home_variable() {
    let home = tempfile::tempdir().unwrap();
    let xdg = home.path().join("xdg");
    // Linux and macOS keep their locations: $XDG_CONFIG_HOME/mandate, else
    // ~/.config/mandate.
    assert_eq!(
        config_file_with(Some(home.path()), Some(&xdg)),
        xdg.join("mandate/config.json").display().to_string()
    );
    assert_eq!(
        config_file_with(Some(home.path()), None),
        home.path()
            .join(".config/mandate/config.json")
            .display()
            .to_string()
    );
    assert_eq!(
        config_file_with(None, Some(&xdg)),
        xdg.join("mandate/config.json").display().to_string()
    );
    // Without HOME (as on Windows, where it is not set) the platform's own record of the
    // home directory is used; the CLI used to stop with "cannot find the home directory".
    let found = config_file_with(None, None);
    assert!(
        Path::new(&found).is_absolute() && found.ends_with(".config/mandate/config.json"),
        "{found}"
    );
}
