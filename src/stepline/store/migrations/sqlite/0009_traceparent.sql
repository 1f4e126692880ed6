-- The W3C trace context of the span that created an instance, which every activation of it
-- continues (docs/observability.md, "Traces"); NULL when its creator traced nothing.
ALTER TABLE instances ADD COLUMN traceparent TEXT;
