//! How log lines look at the default verbosity: `berth: warning: …` (and `berth: error: …`), like berth's own
//! error lines, instead of tracing's `WARN …` columns. With `-v` (and in the gateway's log) lines keep their time and
//! level for reading later.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// One line per event: `berth: ` and, for warnings and errors, what it is.
pub struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let kind = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            _ => "",
        };
        write!(writer, "berth: {kind}")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// One JSON object per line (`gateway run --json`, `dashboard --json`): `time` (RFC 3339, UTC), `level`, `message`
/// and any other fields of the event, for log collectors.
pub struct JsonLines;

/// Collects an event's fields into a JSON object.
struct Fields(serde_json::Map<String, serde_json::Value>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), serde_json::Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), serde_json::Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        use domain::ports::Clock;
        let mut fields = Fields(serde_json::Map::new());
        fields.0.insert("time".into(), crate::edge::context::SystemClock.now().to_rfc3339().into());
        fields.0.insert("level".into(), event.metadata().level().as_str().to_ascii_lowercase().into());
        event.record(&mut fields);
        writeln!(writer, "{}", serde_json::Value::Object(fields.0))
    }
}
