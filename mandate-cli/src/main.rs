//! `mandate`: the command-line client (being built; see the CLI issue).

fn main() {
    eprintln!("mandate: the CLI is not built yet");
    std::process::exit(2);
}
