// SPDX-License-Identifier: Apache-2.0
// validate.mjs FILE.json: validates Kubernetes objects against the API's
// schemas, as `kubectl apply` (strict field validation) would.
//
// FILE.json holds a JSON array of objects (tests/integration/
// test_kubernetes.py turns the YAML into it with PyYAML). Each object is
// checked twice:
//  - with kubernetes-models' validator (types, required fields, enums), the
//    OpenAPI schema of its apiVersion and kind;
//  - for unknown fields, which that validator lets through but the API
//    server refuses: the allowed names come from the models' type
//    declarations (*.d.ts), one interface per schema definition.
// Prints one line per object, "ok KIND/NAME" or "not ok KIND/NAME: why",
// and exits 1 if any object is invalid.
import { readFileSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const modelsDir = dirname(require.resolve("kubernetes-models/package.json"));
const nodeModules = dirname(modelsDir);

// The interface of one .d.ts file: {props: {name: ref-file or null}}, or
// null when the file declares no interface (a type alias such as
// IntOrString).
const cache = new Map();
function parseDts(file) {
  if (cache.has(file)) return cache.get(file);
  const text = readFileSync(file, "utf8").replace(/\/\*\*[\s\S]*?\*\//g, "");
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
    let target = m[2].replace(/\.js$/, "");
    target = target.startsWith(".")
      ? resolve(dirname(file), target)
      : join(nodeModules, target);
    imports.set(m[1], target + ".d.ts");
  }
  const body = text.match(/^export interface \w+(?: extends [\w, ]+)? \{\n([\s\S]*?)^\}/m);
  if (!body) {
    cache.set(file, null);
    return null;
  }
  const props = {};
  for (const m of body[1].matchAll(/^ {4}"([^"]+)"\??: (.*)$/gm)) {
    const ref = m[2].match(/\b(IIoK8s\w+)\b/);
    props[m[1]] = ref && imports.has(ref[1]) ? imports.get(ref[1]) : null;
  }
  cache.set(file, { props });
  return cache.get(file);
}

// Appends to errors every field of value (at path) that file's interface
// does not name, recursing into objects and arrays of known interfaces.
function unknownFields(value, file, path, errors) {
  if (Array.isArray(value)) {
    value.forEach((v, i) => unknownFields(v, file, `${path}[${i}]`, errors));
    return;
  }
  if (value === null || typeof value !== "object" || !existsSync(file)) return;
  const iface = parseDts(file);
  if (!iface) return;
  for (const [k, v] of Object.entries(value)) {
    if (!(k in iface.props)) errors.push(`${path}.${k}: unknown field`);
    else if (iface.props[k]) unknownFields(v, iface.props[k], `${path}.${k}`, errors);
  }
}

const docs = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = 0;
for (const doc of docs) {
  const name = `${doc.kind}/${doc.metadata?.name}`;
  const errors = [];
  let Model;
  try {
    Model = (await import(`kubernetes-models/${doc.apiVersion}`))[doc.kind];
  } catch (e) {
    Model = undefined;
  }
  if (!Model) {
    errors.push(`no schema for ${doc.apiVersion} ${doc.kind}`);
  } else {
    try {
      new Model(doc).validate();
    } catch (e) {
      errors.push(e.message);
    }
    const dts = join(modelsDir, doc.apiVersion, `${doc.kind}.d.ts`);
    unknownFields(doc, dts, name, errors);
  }
  if (errors.length) {
    failed++;
    console.log(`not ok ${name}: ${errors.join("; ")}`);
  } else {
    console.log(`ok ${name}`);
  }
}
process.exit(failed ? 1 : 0);
