/* logic.js — the playground's pure functions (no DOM): reading a
 * server-sent event stream, building a request, finding where a
 * compiler error points, and checking an output against its constraint
 * (JSON parsed and checked against the schema; a regex as a full match).
 * Loaded by index.html before app.js; unit-tested by
 * tests/browser/logic_test.js (node, and the headless browser). */
"use strict";

var TrellisLogic = (function () {
  /* An SSE reader: feed(text chunk) returns the data payloads of the
   * events completed so far ("[DONE]" included as a string). Events end
   * at a blank line; "data:" lines of one event are joined by "\n". */
  function sseReader() {
    var buf = "";
    var data = [];
    return {
      feed: function (chunk) {
        buf += chunk;
        var out = [];
        for (;;) {
          var nl = buf.indexOf("\n");
          if (nl < 0) break;
          var line = buf.slice(0, nl).replace(/\r$/, "");
          buf = buf.slice(nl + 1);
          if (line === "") {
            if (data.length) out.push(data.join("\n"));
            data = [];
          } else if (line.indexOf("data:") === 0) {
            data.push(line.slice(5).replace(/^ /, ""));
          }
        }
        return out;
      }
    };
  }

  /* The chat request body for the settings s and the messages. */
  function buildRequest(s, messages) {
    var body = { messages: messages, stream: true, stream_options: { include_usage: true },
                 logprobs: true, top_logprobs: 5 };
    var num = { temperature: s.temperature, top_p: s.top_p, top_k: s.top_k, min_p: s.min_p,
                max_tokens: s.max_tokens, seed: s.seed };
    Object.keys(num).forEach(function (k) {
      if (num[k] !== "" && num[k] !== undefined && num[k] !== null && !isNaN(Number(num[k])))
        body[k] = Number(num[k]);
    });
    if (s.stop) body.stop = s.stop.split("|").filter(function (x) { return x.length; });
    var c = constraintFields(s.kind, s.constraint);
    Object.keys(c).forEach(function (k) { body[k] = c[k]; });
    return body;
  }

  /* The request fields of a constraint; throws on a schema that is not
   * JSON or choices that are not a list of strings. */
  function constraintFields(kind, text) {
    if (kind === "json_schema") {
      var schema = JSON.parse(text);
      return { response_format: { type: "json_schema",
                                  json_schema: { name: "playground", schema: schema } } };
    }
    if (kind === "regex") return { regex: text };
    if (kind === "ebnf") return { ebnf: text };
    if (kind === "choices") {
      var list = JSON.parse(text);
      if (!Array.isArray(list) || !list.every(function (x) { return typeof x === "string"; }))
        throw new Error("choices must be a JSON list of strings");
      return { choices: list };
    }
    return {};
  }

  /* Where a compiler message points in text, as an offset (-1: nowhere
   * known): "at byte N" (regex), "L:C:" (EBNF, line and column from 1),
   * or a JSON pointer "/properties/a:" (JSON Schema: the last key of the
   * pointer, where it first appears in the text after the previous ones). */
  function errorOffset(message, text) {
    message = message || "";
    text = text || "";
    var m = /(?:offset|byte|position)\s+(\d+)/i.exec(message);
    if (m) return Number(m[1]);
    m = /(?:^|\s)(\d+):(\d+):/.exec(message);
    if (m) {
      var line = Number(m[1]), col = Number(m[2]), off = 0;
      for (var i = 1; i < line; i++) {
        var nl = text.indexOf("\n", off);
        if (nl < 0) return -1;
        off = nl + 1;
      }
      return off + col - 1;
    }
    m = /(?:^|\s)(\/[^\s:]*):/.exec(message);
    if (m) {
      var at = 0, found = -1;
      m[1].split("/").slice(1).forEach(function (seg) {
        if (/^\d+$/.test(seg)) return;
        var k = text.indexOf(JSON.stringify(seg.replace(/~1/g, "/").replace(/~0/g, "~")), at);
        if (k >= 0) { found = k; at = k + 1; }
      });
      return found;
    }
    return -1;
  }

  function typeOf(v) {
    if (v === null) return "null";
    if (Array.isArray(v)) return "array";
    if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
    return typeof v;
  }

  /* JSON Schema checking, the common keywords (type, enum, const,
   * properties, required, additionalProperties, items, prefixItems,
   * min/max(Length|Items|imum), pattern, anyOf/oneOf/allOf, $ref to
   * #/$defs or #/definitions). Returns a list of "path: problem". */
  function checkSchema(value, schema, root, path, errs) {
    root = root || schema;
    path = path || "$";
    errs = errs || [];
    if (schema === true || schema === undefined) return errs;
    if (schema === false) { errs.push(path + ": no value allowed"); return errs; }
    if (schema.$ref) {
      var m = /^#\/(\$defs|definitions)\/(.+)$/.exec(schema.$ref);
      if (m && root[m[1]] && root[m[1]][m[2]]) checkSchema(value, root[m[1]][m[2]], root, path, errs);
      return errs;
    }
    var t = typeOf(value);
    if (schema.type) {
      var types = Array.isArray(schema.type) ? schema.type : [schema.type];
      var ok = types.some(function (x) {
        return x === t || (x === "number" && t === "integer") ||
               (x === "integer" && t === "number" && Number.isInteger(value));
      });
      if (!ok) errs.push(path + ": expected " + types.join(" or ") + ", got " + t);
    }
    if (schema.enum && !schema.enum.some(function (e) { return JSON.stringify(e) === JSON.stringify(value); }))
      errs.push(path + ": not one of the enum values");
    if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value))
      errs.push(path + ": not the const value");
    if (t === "integer" || t === "number") {
      if (schema.minimum !== undefined && value < schema.minimum) errs.push(path + ": below minimum");
      if (schema.maximum !== undefined && value > schema.maximum) errs.push(path + ": above maximum");
      if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) errs.push(path + ": not above exclusiveMinimum");
      if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) errs.push(path + ": not below exclusiveMaximum");
    }
    if (t === "string") {
      var n = Array.from(value).length;
      if (schema.minLength !== undefined && n < schema.minLength) errs.push(path + ": shorter than minLength");
      if (schema.maxLength !== undefined && n > schema.maxLength) errs.push(path + ": longer than maxLength");
      if (schema.pattern && !new RegExp(schema.pattern, "u").test(value)) errs.push(path + ": does not match pattern");
    }
    if (t === "array") {
      if (schema.minItems !== undefined && value.length < schema.minItems) errs.push(path + ": fewer than minItems");
      if (schema.maxItems !== undefined && value.length > schema.maxItems) errs.push(path + ": more than maxItems");
      var pre = schema.prefixItems || [];
      value.forEach(function (v, i) {
        var s = i < pre.length ? pre[i] : schema.items;
        if (s !== undefined) checkSchema(v, s, root, path + "[" + i + "]", errs);
      });
    }
    if (t === "object") {
      var props = schema.properties || {};
      (schema.required || []).forEach(function (k) {
        if (!(k in value)) errs.push(path + ": missing required '" + k + "'");
      });
      Object.keys(value).forEach(function (k) {
        if (k in props) checkSchema(value[k], props[k], root, path + "." + k, errs);
        else if (schema.additionalProperties === false) errs.push(path + ": unexpected property '" + k + "'");
        else if (typeof schema.additionalProperties === "object")
          checkSchema(value[k], schema.additionalProperties, root, path + "." + k, errs);
      });
    }
    ["allOf", "anyOf", "oneOf"].forEach(function (kw) {
      if (!schema[kw]) return;
      var passing = schema[kw].filter(function (s) { return checkSchema(value, s, root, path, []).length === 0; }).length;
      if (kw === "allOf" && passing !== schema[kw].length) errs.push(path + ": fails allOf");
      if (kw === "anyOf" && passing === 0) errs.push(path + ": fails anyOf");
      if (kw === "oneOf" && passing !== 1) errs.push(path + ": matches " + passing + " oneOf branches");
    });
    return errs;
  }

  /* {valid: true|false|null, why}: null when the page cannot check (EBNF,
   * no constraint). An output cut by max_tokens is reported as such. */
  function validate(kind, constraint, text, finish) {
    if (finish === "length") return { valid: false, why: "cut at max_tokens before the constraint completed" };
    try {
      if (kind === "json_schema") {
        var v = JSON.parse(text);
        var errs = checkSchema(v, JSON.parse(constraint));
        return errs.length ? { valid: false, why: errs.join("; ") } : { valid: true, why: "valid JSON, matches the schema" };
      }
      if (kind === "regex") {
        var ok = new RegExp("^(?:" + constraint + ")$", "u").test(text);
        return { valid: ok, why: ok ? "matches the regex" : "does not match the regex" };
      }
      if (kind === "choices") {
        var list = JSON.parse(constraint);
        var inList = list.indexOf(text) >= 0;
        return { valid: inList, why: inList ? "one of the choices" : "not one of the choices" };
      }
    } catch (e) {
      return { valid: false, why: String(e.message || e) };
    }
    return { valid: null, why: kind === "ebnf" ? "EBNF: enforced by the server's grammar, not re-checked here" : "" };
  }

  /* A log-probability as a colour from red (unlikely) to green (sure). */
  function logprobColor(lp) {
    var p = Math.exp(Math.max(lp, -10));
    var hue = Math.round(120 * p);
    return "hsl(" + hue + ", 70%, 85%)";
  }

  return { sseReader: sseReader, buildRequest: buildRequest, constraintFields: constraintFields,
           errorOffset: errorOffset, checkSchema: checkSchema, validate: validate,
           logprobColor: logprobColor };
})();

if (typeof module !== "undefined") module.exports = TrellisLogic;
