//! The project templates, as data.
//!
//! Each file is written with three placeholders: `{{name}}` is the project name as the
//! ecosystem's package manager wants it (npm, PyPI, Cargo, Go module), `{{module}}` is
//! the importable identifier (Python package), `{{title}}` is the `projectName` as the
//! user wrote it (README only, where no escaping is needed). Paths may use them too.

/// How a template's ecosystem spells a project name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    Npm,
    Python,
    Cargo,
    Go,
}

pub struct Template {
    pub name: &'static str,
    pub naming: Naming,
    /// `(path, contents)`, rendered with the placeholders above.
    pub files: &'static [(&'static str, &'static str)],
}

pub const TEMPLATES: &[Template] = &[
    Template {
        name: "node-typescript",
        naming: Naming::Npm,
        files: NODE_TYPESCRIPT,
    },
    Template {
        name: "node-javascript",
        naming: Naming::Npm,
        files: NODE_JAVASCRIPT,
    },
    Template {
        name: "python",
        naming: Naming::Python,
        files: PYTHON,
    },
    Template {
        name: "rust",
        naming: Naming::Cargo,
        files: RUST,
    },
    Template {
        name: "go",
        naming: Naming::Go,
        files: GO,
    },
    Template {
        name: "empty",
        naming: Naming::Npm,
        files: &[],
    },
];

const NODE_TYPESCRIPT: &[(&str, &str)] = &[
    (
        "package.json",
        r#"{
  "name": "{{name}}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "main": "dist/index.js",
  "types": "dist/index.d.ts",
  "scripts": {
    "build": "tsc",
    "test": "tsc && node --test dist/index.test.js"
  },
  "devDependencies": {
    "@types/node": "^20.0.0",
    "typescript": "^5.4.0"
  }
}
"#,
    ),
    (
        "tsconfig.json",
        r#"{
  "compilerOptions": {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "rootDir": "src",
    "outDir": "dist",
    "declaration": true,
    "strict": true,
    "skipLibCheck": true,
    "types": ["node"]
  },
  "include": ["src"]
}
"#,
    ),
    (
        "src/index.ts",
        r#"export function greet(name: string): string {
  return `Hello, ${name}!`;
}
"#,
    ),
    (
        "src/index.test.ts",
        r#"import { test } from "node:test";
import assert from "node:assert/strict";
import { greet } from "./index.js";

test("greet says hello", () => {
  assert.equal(greet("{{name}}"), "Hello, {{name}}!");
});
"#,
    ),
    (".gitignore", "node_modules/\ndist/\n"),
    (
        "README.md",
        "# {{title}}\n\nA TypeScript project for Node.js.\n\n```sh\nnpm install\nnpm run build\nnpm test\n```\n",
    ),
];

const NODE_JAVASCRIPT: &[(&str, &str)] = &[
    (
        "package.json",
        r#"{
  "name": "{{name}}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "main": "src/index.js",
  "scripts": {
    "test": "node --test src/index.test.js"
  }
}
"#,
    ),
    (
        "src/index.js",
        r#"export function greet(name) {
  return `Hello, ${name}!`;
}
"#,
    ),
    (
        "src/index.test.js",
        r#"import { test } from "node:test";
import assert from "node:assert/strict";
import { greet } from "./index.js";

test("greet says hello", () => {
  assert.equal(greet("{{name}}"), "Hello, {{name}}!");
});
"#,
    ),
    (".gitignore", "node_modules/\n"),
    (
        "README.md",
        "# {{title}}\n\nA JavaScript project for Node.js.\n\n```sh\nnpm test\n```\n",
    ),
];

const PYTHON: &[(&str, &str)] = &[
    (
        "pyproject.toml",
        r#"[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{{name}}"
version = "0.1.0"
readme = "README.md"
requires-python = ">=3.9"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
pythonpath = ["src"]
testpaths = ["tests"]
"#,
    ),
    (
        "src/{{module}}/__init__.py",
        r#"def greet(name: str) -> str:
    return f"Hello, {name}!"
"#,
    ),
    (
        "tests/test_{{module}}.py",
        r#"import unittest

from {{module}} import greet


class GreetTest(unittest.TestCase):
    def test_greet(self):
        self.assertEqual(greet("{{module}}"), "Hello, {{module}}!")


if __name__ == "__main__":
    unittest.main()
"#,
    ),
    (".gitignore", "__pycache__/\n*.egg-info/\n.venv/\n.pytest_cache/\nbuild/\ndist/\n"),
    (
        "README.md",
        "# {{title}}\n\nA Python project.\n\n```sh\npython -m pytest\n# or, without pytest:\nPYTHONPATH=src python -m unittest discover -s tests\n```\n",
    ),
];

const RUST: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2021"

[dependencies]
"#,
    ),
    (
        "src/main.rs",
        r#"fn greet(name: &str) -> String {
    format!("Hello, {name}!")
}

fn main() {
    println!("{}", greet("{{name}}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets() {
        assert_eq!(greet("{{name}}"), "Hello, {{name}}!");
    }
}
"#,
    ),
    (".gitignore", "/target\n"),
    (
        "README.md",
        "# {{title}}\n\nA Rust project.\n\n```sh\ncargo run\ncargo test\n```\n",
    ),
];

const GO: &[(&str, &str)] = &[
    ("go.mod", "module {{name}}\n\ngo 1.21\n"),
    (
        "main.go",
        r#"package main

import "fmt"

func greet(name string) string {
	return fmt.Sprintf("Hello, %s!", name)
}

func main() {
	fmt.Println(greet("{{name}}"))
}
"#,
    ),
    (
        "main_test.go",
        r#"package main

import "testing"

func TestGreet(t *testing.T) {
	if got := greet("{{name}}"); got != "Hello, {{name}}!" {
		t.Fatalf("greet() = %q", got)
	}
}
"#,
    ),
    (".gitignore", "/{{name}}\n*.test\n"),
    (
        "README.md",
        "# {{title}}\n\nA Go project.\n\n```sh\ngo run .\ngo test ./...\n```\n",
    ),
];
