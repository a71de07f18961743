//! The API's JSON Schema, made from the model's types: what each route
//! answers and what each takes. Checked in as docs/api.schema.json (its
//! diff is the API's changelog; `make api-schema` writes it, and a test
//! fails while the file and the types disagree). The tests' client
//! (scripts/tests/bloatdtest.py) checks every answer it reads against it.

use crate::api::{self, route};
use crate::journal::{Episode, EpisodeDetail, HistoryQuery, IncidentsQuery, MinuteRow};
use crate::{NetPath, Series, ServiceView, Snapshot, Socket};
use schemars::gen::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

/// One route's answer or body: its schema, made by `gen`.
fn one<T: JsonSchema>(gen: &mut SchemaGenerator) -> Value {
    serde_json::to_value(gen.subschema_for::<T>()).expect("a schema is JSON")
}

/// The whole document: `answers` and `requests` by route (the route as
/// [`route`] spells it), their types under `definitions` (draft-07).
pub fn api_schema() -> Value {
    let mut gen = SchemaSettings::draft07().into_generator();
    let answers: Vec<(&str, Value)> = vec![
        (route::STATUS, one::<api::Status>(&mut gen)),
        (route::SOCKETS, one::<Vec<Socket>>(&mut gen)),
        (route::SNAPSHOT, one::<Snapshot>(&mut gen)),
        (route::SERIES, one::<Series>(&mut gen)),
        (route::PATHS, one::<Vec<NetPath>>(&mut gen)),
        (route::FLOORS, one::<api::Floors>(&mut gen)),
        (route::SERVICES, one::<Vec<ServiceView>>(&mut gen)),
        (route::CC, one::<api::CcInfo>(&mut gen)),
        (route::CC_DEFAULT, one::<api::DefaultResp>(&mut gen)),
        (route::POLICY, one::<api::PolicyInfo>(&mut gen)),
        (route::POLICY_DRWA, one::<api::DrwaReq>(&mut gen)),
        (route::POLICY_RULE, one::<api::RuleReq>(&mut gen)),
        (route::INCIDENTS, one::<Vec<Episode>>(&mut gen)),
        (route::INCIDENT, one::<EpisodeDetail>(&mut gen)),
        (route::HISTORY, one::<Vec<MinuteRow>>(&mut gen)),
    ];
    let requests: Vec<(&str, Value)> = vec![
        (route::SOCKETS, one::<api::SocketsQuery>(&mut gen)),
        (route::SNAPSHOT, one::<api::SnapshotQuery>(&mut gen)),
        (route::SERIES, one::<api::SeriesQuery>(&mut gen)),
        (route::PATHS, one::<api::PathsQuery>(&mut gen)),
        (route::CC_DEFAULT, one::<api::DefaultReq>(&mut gen)),
        (route::POLICY_DRWA, one::<api::DrwaReq>(&mut gen)),
        (route::POLICY_RULE, one::<api::RuleReq>(&mut gen)),
        (route::INCIDENTS, one::<IncidentsQuery>(&mut gen)),
        (route::HISTORY, one::<HistoryQuery>(&mut gen)),
    ];
    let by_route = |v: Vec<(&str, Value)>| -> Map<String, Value> {
        v.into_iter().map(|(r, s)| (r.to_string(), s)).collect()
    };
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "bloatd API",
        "description": "What each route of bloatd's API answers (answers) and takes \
                        (requests: a GET's query, a POST's body), by route; \
                        made from bloatd-model's types (model/src/schema.rs).",
        "answers": by_route(answers),
        "requests": by_route(requests),
        "definitions": serde_json::to_value(gen.definitions()).expect("a schema is JSON"),
    })
}

/// The document as checked in: pretty, one trailing newline.
pub fn api_schema_text() -> String {
    let mut s = serde_json::to_string_pretty(&api_schema()).expect("a schema is JSON");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/api.schema.json is what the types make: change a type and
    /// this fails until `make api-schema` writes the file (its diff, in
    /// the same commit, is the API's changelog).
    #[test]
    fn the_checked_in_schema_is_what_the_types_make() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.schema.json");
        let made = api_schema_text();
        if std::env::var_os("BLOATD_WRITE_SCHEMA").is_some() {
            std::fs::write(path, &made).expect("write docs/api.schema.json");
        }
        let kept = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            kept == made,
            "docs/api.schema.json differs from the model's types: run `make api-schema` \
             and commit the file"
        );
    }

    /// Every route the API has an answer in the schema.
    #[test]
    fn every_route_answers_something() {
        let s = api_schema();
        for r in [
            route::STATUS,
            route::SOCKETS,
            route::SNAPSHOT,
            route::INCIDENT,
            route::HISTORY,
        ] {
            assert!(s["answers"][r].is_object(), "{r}");
        }
        assert!(s["definitions"]["Socket"]["properties"]["cookie"].is_object());
    }
}
