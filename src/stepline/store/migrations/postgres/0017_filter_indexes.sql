-- A filter's numeric tag test names its kind (numbers and booleans share num_value): with the
-- kind in the index it reads the index alone, and an equality reads it in instance pk order.
DROP INDEX instance_tags_num;
CREATE INDEX instance_tags_num ON instance_tags (key, kind, num_value, instance_pk);
